"""Sizes as people write them: '4M', '1G', '512K' (binary units), for the lab's options and the
monitor's capture limits alike."""

from __future__ import annotations

import re

from jstall.errors import JstallError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int, what: str = "size") -> int:
    """Bytes of a size: an int, or text like '4096', '512K', '4M', '1G', '1.5G', '4MiB'
    (binary units)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise JstallError(f"{what} {text}: must be positive (e.g. 4M, 1G)")
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", str(text))
    if not m:
        raise JstallError(f"{what} '{text}': not a size; write it like 4096, 512K, 16M or 1G")
    value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise JstallError(f"{what} '{text}': must be positive (e.g. 4M, 1G)")
    return value


def format_size(n: int) -> str:
    """'4M', '1G', '1536K' or bytes: the largest binary unit that divides n."""
    for unit in ("T", "G", "M", "K"):
        if n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return str(n)
