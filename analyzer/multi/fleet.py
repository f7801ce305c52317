"""Many sessions at once: find them, summarize each on a Dask worker, rank hosts and filesystems.

``run_fleet(paths, scheduler=None)`` finds every session under ``paths`` (directories searched
recursively, globs, fsspec URLs), summarizes each with the analyzer's own functions
(:func:`summarize`: ``analyze(path).to_dict()`` plus the session's log2 call histograms) on a
``dask.distributed`` cluster -- a LocalCluster of worker processes sized to the machine, or
the cluster at ``scheduler`` -- and returns a :class:`Fleet`.  Only summaries (a few KB per
session) travel back to the client.

Per session and journal (:attr:`Fleet.rows`): host, device, kernel, journal size, inode size,
duration, calls, stalls, stall time by cause, p99 per call type, headroom low, forced
checkpoints and the first recommendation with its numbers.  The session-level figures are
the ``jstall analyze --json`` document's, unchanged.  Rankings (:meth:`Fleet.hosts`,
:meth:`Fleet.filesystems`) sum stall time; fleet-wide latency distributions
(:meth:`Fleet.histograms`) add the sessions' log2 histograms, so their counts are exact.
Sessions that fail to load are kept in :attr:`Fleet.errors` with their error.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall import kinds
from jstall.errors import JstallError
from jstall.jbd2 import headroom_low
from jstall.session import METADATA_FILE, collected_partitions

from jstall.analyzer.stalls.causes import CAUSES
from jstall.analyzer.stalls.find import DEFAULT_MIN_MS
from jstall.analyzer.summary import json_safe
from jstall.analyzer.analysis import analyze
from jstall.analyzer.render.text import text_table

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from distributed import Client, LocalCluster

#: Version of the JSON document ``jstall fleet --json`` prints.
JSON_SCHEMA_VERSION = 1

_GLOB_CHARS = "*?["


# --- finding sessions ---------------------------------------------------------------------

def _split(url):
    """(fsspec filesystem, path inside it, is local)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return fs, path, protocol in ("file", "local")


def find_sessions(paths: Iterable[str]) -> list[str]:
    """Session locations under ``paths``: a directory holding ``metadata.json`` is a
    session; other directories are searched recursively; globs expand first.  Local
    sessions come back as plain paths, others as URLs.  Raises JstallError for a path that
    matches nothing (bad input), never for what a session holds."""
    found = []
    for url in paths:
        try:
            fs, root, local = _split(url)
        except (ImportError, ValueError) as e:
            raise JstallError(f"{url}: cannot open ({str(e).splitlines()[0]}); install its fsspec backend "
                              "(e.g. pip install s3fs) or give a local path") from None
        matches = sorted(fs.glob(root)) if any(c in root for c in _GLOB_CHARS) else [root]
        matches = [m for m in matches if fs.exists(m)]
        if not matches:
            raise JstallError(f"{url}: no such file or directory; give session directories, a collection "
                              "root or a glob")
        here = []
        for m in matches:
            m = m.rstrip("/") or "/"
            if fs.isfile(m):
                if m.rsplit("/", 1)[-1] == METADATA_FILE:
                    here.append(m.rsplit("/", 1)[0])
            elif fs.exists(m + "/" + METADATA_FILE):
                here.append(m)
            else:
                here.extend(f.rsplit("/", 1)[0] for f in fs.find(m) if f.rsplit("/", 1)[-1] == METADATA_FILE)
        found.extend(os.path.normpath(h) if local else fs.unstrip_protocol(h) for h in here)
    return sorted(dict.fromkeys(found))


# --- one session, on a worker ---------------------------------------------------------------

def _histograms(session):
    """{syscall: {bucket: count}} of every traced call (call_histograms, all devices)."""
    h = session.call_histograms
    if not len(h):
        return {}
    name, names = pd.factorize(h["syscall"].to_numpy(dtype=object), sort=True)
    g, keys = pd.MultiIndex.from_arrays([name, h["bucket"].to_numpy(dtype="int64")]).factorize()
    n = np.zeros(len(keys), dtype="int64")
    np.add.at(n, g, h["count"].to_numpy(dtype="int64"))
    out = {}
    for (i, bucket), c in sorted(zip(keys.tolist(), n.tolist())):  # one per (syscall, bucket): a few dozen
        if c and i >= 0:
            out.setdefault(str(names[i]), {})[int(bucket)] = int(c)
    return out


def _label(v):
    """A name for a table cell: '-' for none (None, NaN, empty)."""
    return "-" if v is None or (isinstance(v, float) and v != v) or v == "" else str(v)


def _journal_causes(stalls):
    """{dev: {cause: off-CPU ms}} from the analyzer's stall table."""
    if not len(stalls):
        return {}
    cols = [f"{c}_ms" for c in CAUSES]
    g = stalls[cols].groupby(stalls["dev"].astype("str").fillna("").to_numpy(dtype=object)).sum()
    return {dev: dict(zip(CAUSES, map(float, vals))) for dev, vals in zip(g.index, g.to_numpy().tolist())}


def _analyze_url(url, min_ms):
    """The analysis of the session at ``url``; a remote session is copied to a temporary
    directory first (and removed after)."""
    import shutil
    import tempfile


    fs, path, local = _split(url)
    if local:
        return analyze(path, min_ms=min_ms)
    tmp = tempfile.mkdtemp(prefix="jstall-fleet-")
    try:
        dest = os.path.join(tmp, os.path.basename(path.rstrip("/")) or "session")
        fs.get(path.rstrip("/") + "/", dest, recursive=True)
        a = analyze(dest, min_ms=min_ms)
        a.session.tables  # loaded: the copy may go
        return a
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def summarize(url: str, min_ms: float = DEFAULT_MIN_MS) -> dict:
    """Summarize one session (runs on a worker): ``{"path", "error", "analysis",
    "journal_causes", "histograms"}``.  ``analysis`` is ``analyze(path, min_ms).to_dict(top=1)``
    -- the ``jstall analyze --json`` document with only the slowest stall listed; a session that
    fails to load or analyze gives ``error`` (one line) and nothing else."""
    try:
        a = _analyze_url(url, min_ms)
        doc = a.to_dict(top=1)
        doc["session"]["path"] = url
        return {"path": url, "error": None, "analysis": doc, "journal_causes": _journal_causes(a.stalls),
                "histograms": _histograms(a.session)}
    except JstallError as e:
        return {"path": url, "error": str(e)}
    except Exception as e:  # a damaged session must not stop the fleet; name what broke
        msg = str(e).splitlines()[0] if str(e) else ""
        return {"path": url, "error": f"{type(e).__name__}: {msg}".rstrip(": ")}


def summarize_many(urls: Iterable[str], min_ms: float = DEFAULT_MIN_MS) -> list[dict]:
    """:func:`summarize` over a batch (one Dask task per batch keeps scheduling cheap)."""
    return [summarize(u, min_ms) for u in urls]


def _host(summary: dict, partitions: dict | None = None) -> str | None:
    """A session summary's host: the session's own, else its collection path's ``host=``."""
    if partitions is None:
        partitions = collected_partitions(summary["path"])
    return summary["analysis"]["session"].get("host") or partitions.get("host")


# --- many sessions, on Dask -----------------------------------------------------------------

def local_cluster(n_workers: int | None = None) -> LocalCluster:
    """A LocalCluster of single-threaded worker processes, one per CPU (pandas holds the
    GIL), listening on localhost only; its HTTP server (distributed always starts one) takes
    a free port rather than 8787, so it never clashes with another cluster."""
    import logging

    from distributed import LocalCluster

    n = n_workers or os.cpu_count() or 1
    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                        dashboard_address=":0", silence_logs=logging.ERROR)


def summarize_all(urls: Sequence[str], client: Client, min_ms: float = DEFAULT_MIN_MS, batch: int | None = None,
                  progress: Callable[[int, int], object] | None = None) -> list[dict]:
    """Summaries of ``urls`` (in their order) computed on ``client``'s workers.  Batches of
    about ``batch`` sessions (default: enough for 8 tasks per worker) are one task each;
    results are gathered as they finish and their futures released."""
    from distributed import as_completed

    if not urls:
        return []
    workers = max(len(client.scheduler_info().get("workers", {})), 1)
    batch = batch or max(1, min(32, len(urls) // (8 * workers) or 1))
    chunks = [urls[i:i + batch] for i in range(0, len(urls), batch)]
    futures = [client.submit(summarize_many, c, min_ms, pure=False) for c in chunks]
    order = {f.key: i for i, f in enumerate(futures)}
    out = [None] * len(chunks)
    done = 0
    for fut, res in as_completed(futures, with_results=True, raise_errors=False):
        i = order[fut.key]
        if isinstance(res, BaseException) or fut.status == "error":  # the worker itself died (KilledWorker, ...)
            err = res if isinstance(res, BaseException) else fut.exception()
            msg = str(err).splitlines()[0] if str(err) else ""
            res = [{"path": u, "error": f"the worker analyzing it failed: {type(err).__name__}: {msg}".rstrip(": ")}
                   for u in chunks[i]]
        out[i] = res
        done += len(res)
        if progress:
            progress(done, len(urls))
        fut.release()
    return [s for part in out for s in part]


def run_fleet(paths: Sequence[str], scheduler: str | None = None, min_ms: float = DEFAULT_MIN_MS,
              n_workers: int | None = None, progress: Callable[[int, int], object] | None = None) -> Fleet:
    """Find the sessions under ``paths`` and summarize them on Dask (a LocalCluster, or the
    scheduler at ``scheduler``, e.g. ``tcp://host:8786``).  Returns a :class:`Fleet`."""
    from distributed import Client

    urls = find_sessions(paths)
    if not urls:
        raise JstallError(f"no session (a directory holding metadata.json) under {', '.join(paths)}")
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as e:
            raise JstallError(f"--scheduler {scheduler}: cannot connect ({str(e).splitlines()[0]}); start "
                              "'dask scheduler' there or leave --scheduler out for a local cluster") from None
        cluster = None
    else:
        cluster = local_cluster(n_workers or min(os.cpu_count() or 1, len(urls)))
        client = Client(cluster)
    try:
        summaries = summarize_all(urls, client, min_ms=min_ms, progress=progress)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return Fleet(summaries, min_ms=min_ms)


# --- the fleet's tables ---------------------------------------------------------------------

def _top_recommendation(recs):
    """The first recommendation that names a change or a finding (not lost events), and what
    it says in a few words: ``(kind, "10 MiB journal, up to 12.4 s of stalls")``."""
    for r in recs or []:
        if r.get("kind") in ("lost_events",):
            continue
        what = []
        if r.get("journal_size_mib"):
            what.append(f"{r['journal_size_mib']:g} MiB journal")
        if r.get("stall_ms_addressed"):
            ms = r["stall_ms_addressed"]
            what.append(f"{'up to ' if r.get('estimate') else ''}"
                        f"{f'{ms / 1000:.1f} s' if ms >= 1000 else f'{ms:.0f} ms'} of stalls")
        return r.get("kind"), ", ".join(what)
    return None, ""


class Fleet:
    """Summaries of many sessions.  ``summaries``: what :func:`summarize` returned for each
    session; ``rows``, ``errors``, ``hosts()``, ``filesystems()``, ``histograms()``,
    ``distributions()`` are DataFrames (units in column names)."""

    def __init__(self, summaries, min_ms=DEFAULT_MIN_MS):
        self.summaries = list(summaries)
        self.min_ms = float(min_ms)
        self.ok = [s for s in self.summaries if not s.get("error")]
        self.rows = self._rows()
        self.errors = self._errors()

    # one row per session and journal
    def _rows(self):
        rows = []
        syscalls = sorted({k for s in self.ok for k in s["analysis"]["calls"]})
        for s in self.ok:  # one iteration per session
            d = s["analysis"]
            sess = d["session"]
            st = d["stalls"]
            part = collected_partitions(s["path"])
            lab = (sess.get("lab") or {}).get("config") or {}
            kind, nums = _top_recommendation(d["recommendations"])
            base = {
                "session": s["path"], "host": _host(s, part),
                "date": part.get("date") or (sess["start"][:10] if isinstance(sess.get("start"), str) else None),
                "kernel": sess.get("kernel_release"), "status": sess.get("status"),
                "duration_s": sess.get("duration_s"), "lab_pattern": lab.get("pattern"),
                "calls": int(sum(c["count"] for c in d["calls"].values())),
                "session_stalls": st["count"], "session_stall_ms": st["total_ms"], "max_stall_ms": st["max_ms"],
                "events_lost": int(sum(d["events_lost"].values())) + int(d.get("stacks_lost") or 0),
                "top_recommendation": kind, "top_recommendation_summary": nums,
            }
            for c in CAUSES:
                base[f"session_{c}_ms"] = st["by_cause"][c]["total_ms"]
            for name in syscalls:
                base[f"{name}_p99_ms"] = (d["calls"].get(name) or {}).get("p99_ms")
            # one row per journal: ext4's, then XFS logs (a session without either keeps one row)
            xfs_logs = [dict(x, kind=kinds.XFS.name) for x in d.get("xfs_logs") or []]
            for j in d["journals"] + xfs_logs or [None]:
                row = dict(base)
                if j is None:
                    row.update({"dev": None, "device": None, "mountpoint": None, "journal_kind": None,
                                "journal_mib": None, "inode_size": None, "stalls": st["count"],
                                "stall_ms": st["total_ms"], "forced_checkpoints": 0, "log_space_waits": 0,
                                "log_space_wait_ms": 0.0, "headroom_low_blocks": None, "headroom_low_pct": None,
                                "max_fill_pct": None})
                    for c in CAUSES:
                        row[f"{c}_ms"] = st["by_cause"][c]["total_ms"]
                    rows.append(row)
                    continue
                jkind = kinds.of(j)
                xfs_log = jkind is kinds.XFS
                row.update({"dev": j["dev"], "device": j.get("device"), "mountpoint": j.get("mountpoint"),
                            "journal_kind": jkind.name,
                            "journal_mib": j.get("log_mib" if xfs_log else "journal_mib"),
                            "inode_size": j.get("inode_size"), "stalls": j.get("stalls") or 0,
                            "stall_ms": j.get("stall_ms") or 0.0})
                if xfs_log:
                    row.update({"forced_checkpoints": 0, "log_space_waits": j.get("waits") or 0,
                                "log_space_wait_ms": j.get("wait_ms") or 0.0, "headroom_low_blocks": None,
                                "headroom_low_pct": j.get("min_headroom_start_pct"), "max_fill_pct": None})
                else:
                    hb, hp = headroom_low(j)
                    row.update({"forced_checkpoints": j.get("forced_checkpoints") or 0, "log_space_waits": 0,
                                "log_space_wait_ms": 0.0, "headroom_low_blocks": hb, "headroom_low_pct": hp,
                                "max_fill_pct": j.get("max_fill_pct")})
                jc = s.get("journal_causes", {}).get(j["dev"], {})
                for c in CAUSES:
                    row[f"{c}_ms"] = float(jc.get(c, 0.0))
                rows.append(row)
        df = pd.DataFrame(rows)
        if not len(df):
            return df
        df["dominant_cause"] = df[[f"{c}_ms" for c in CAUSES]].idxmax(axis=1).str[:-3].where(df["stall_ms"] > 0)
        return df.sort_values(["stall_ms", "session"], ascending=[False, True], kind="stable").reset_index(drop=True)

    def _errors(self):
        return pd.DataFrame([{"session": s["path"], "error": s["error"]} for s in self.summaries if s.get("error")],
                            columns=["session", "error"])

    def _rank(self, keys):
        r = self.rows
        if not len(r):
            return pd.DataFrame(columns=keys + ["sessions", "stalls", "stall_ms"])
        cause_cols = [f"{c}_ms" for c in CAUSES]
        g = r.groupby(keys, dropna=False)
        out = g.agg(sessions=("session", "nunique"), stalls=("stalls", "sum"), stall_ms=("stall_ms", "sum"),
                    max_stall_ms=("max_stall_ms", "max"), forced_checkpoints=("forced_checkpoints", "sum"),
                    headroom_low_blocks=("headroom_low_blocks", "min"))
        causes = g[cause_cols].sum()
        out["dominant_cause"] = causes.idxmax(axis=1).str[:-3].where(out["stall_ms"] > 0)
        # hours recorded: each session counted once per group
        dur = r.drop_duplicates(keys + ["session"]).groupby(keys, dropna=False)["duration_s"].sum()
        out["stall_ms_per_hour"] = out["stall_ms"] / (dur / 3600.0).where(dur > 0)
        out = out.join(causes)
        return out.sort_values(["stall_ms", "stalls"], ascending=False, kind="stable").reset_index()

    def hosts(self) -> pd.DataFrame:
        """Hosts ranked by stall time: sessions, stalls, stall ms (and per hour recorded), worst
        stall, forced checkpoints, lowest headroom, the dominant cause and ms per cause."""
        return self._rank(["host"])

    def filesystems(self) -> pd.DataFrame:
        """Filesystems (host, device, mount point) ranked by stall time, as :meth:`hosts`."""
        return self._rank(["host", "dev", "mountpoint", "journal_mib", "inode_size"])

    def writers(self) -> pd.DataFrame:
        """Who fills the journals over the fleet: one row per cgroup name and journal kind
        (``jbd2``: the blocks its processes logged; ``xfs``: the log bytes), summed over every
        session's writers (the analyze document's ``writers.writers``), with ``share_pct`` of
        all that kind logged in the fleet, ``sessions``, ``journals`` (session and device
        pairs it logged something on), ``hosts`` (the host names, sorted) and ``stall_ms``: the stall time of the
        cgroup's processes on journals of that kind (``writers.victims``). Largest share first."""
        cols = ["cgroup", "journal_kind", "unit", "logged", "share_pct", "sessions", "journals", "hosts",
                "stall_ms"]
        if getattr(self, "_writers", None) is not None:  # the text, JSON and HTML each ask
            return self._writers.copy()
        wrote, stalled = [], []
        for s in self.ok:
            d = s["analysis"]
            host = _host(s)
            kind_of = {j["dev"]: kinds.of(j).name for j in d["journals"]}
            kind_of.update({x["dev"]: kinds.XFS.name for x in d.get("xfs_logs") or []})
            w = d.get("writers") or {}
            for r in w.get("writers") or []:
                xfs_log = r.get("logged_bytes") is not None
                logged = r["logged_bytes"] if xfs_log else r.get("logged_blocks")
                if not logged:
                    continue   # handles that logged nothing: not a writer of this session
                wrote.append({"cgroup": r.get("cgroup") or "-", "journal_kind": kinds.XFS.name if xfs_log
                              else kinds.JBD2.name, "unit": "bytes" if xfs_log else "blocks",
                              "logged": float(logged), "session": s["path"], "dev": r["dev"], "host": host})
            for r in w.get("victims") or []:
                stalled.append({"cgroup": r.get("cgroup") or "-",
                                "journal_kind": kind_of.get(r["dev"], kinds.JBD2.name),
                                "stall_ms": float(r.get("stall_ms") or 0.0)})
        if not wrote:
            self._writers = pd.DataFrame(columns=cols)
            return self._writers.copy()
        w = pd.DataFrame(wrote)
        keys = ["cgroup", "journal_kind", "unit"]
        g = w.groupby(keys, sort=False)
        out = g.agg(logged=("logged", "sum"), sessions=("session", "nunique"),
                    hosts=("host", lambda h: sorted({str(x) for x in h if x is not None})))
        out["journals"] = w.drop_duplicates(keys + ["session", "dev"]).groupby(keys, sort=False).size()
        out = out.reset_index()
        out["share_pct"] = 100.0 * out["logged"] / out.groupby("journal_kind")["logged"].transform("sum")
        st = (pd.DataFrame(stalled).groupby(["cgroup", "journal_kind"])["stall_ms"].sum() if stalled
              else pd.Series(dtype="float64"))
        out["stall_ms"] = [float(st.get((c, k), 0.0)) for c, k in zip(out["cgroup"], out["journal_kind"])]
        self._writers = out.sort_values(["share_pct", "logged", "cgroup"], ascending=[False, False, True],
                                        kind="stable").reset_index(drop=True)[cols]
        return self._writers.copy()

    def histograms(self) -> pd.DataFrame:
        """Fleet-wide log2 latency histograms: one row per (syscall, bucket) with ``low_ns``,
        ``high_ns`` and ``count`` -- the sum of every session's call_histograms."""
        if getattr(self, "_histograms", None) is not None:  # the text, JSON and HTML each ask
            return self._histograms.copy()
        tot = {}
        for s in self.ok:
            for name, buckets in s.get("histograms", {}).items():
                t = tot.setdefault(name, {})
                for b, n in buckets.items():
                    t[int(b)] = t.get(int(b), 0) + int(n)
        rows = [{"syscall": name, "bucket": b, "low_ns": 2 ** b if b else 0, "high_ns": 2 ** (b + 1), "count": n}
                for name, t in sorted(tot.items()) for b, n in sorted(t.items())]
        self._histograms = pd.DataFrame(rows, columns=["syscall", "bucket", "low_ns", "high_ns", "count"])
        return self._histograms.copy()

    def distributions(self) -> pd.DataFrame:
        """Per syscall over the fleet: ``count`` (exact: histograms add up), ``sessions``,
        ``p50_ms``/``p99_ms`` (the log2 bucket holding that rank: its upper bound, so never an
        underestimate), ``max_ms`` (the largest maximum of any session, exact)."""
        h = self.histograms()
        maxes, sessions = {}, {}
        for s in self.ok:
            for name, c in s["analysis"]["calls"].items():
                if c.get("max_ms") is not None:
                    maxes[name] = max(maxes.get(name, 0.0), c["max_ms"])
                sessions[name] = sessions.get(name, 0) + 1
        rows = []
        for name, d in h.groupby("syscall", sort=True):
            cum = np.cumsum(d["count"].to_numpy())
            n = int(cum[-1])
            row = {"syscall": name, "count": n, "sessions": sessions.get(name, 0)}
            for p in (0.5, 0.99):
                i = int(np.searchsorted(cum, max(1, int(np.ceil(p * n))), side="left"))
                row[f"p{int(p * 100)}_ms"] = min(float(d["high_ns"].iloc[i]) / 1e6, maxes.get(name, np.inf))
            row["max_ms"] = maxes.get(name)
            rows.append(row)
        return pd.DataFrame(rows, columns=["syscall", "count", "sessions", "p50_ms", "p99_ms", "max_ms"])

    # --- output ---------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The ``jstall fleet --json`` document (docs/fleet.md)."""
        def records(df):
            return [] if df is None or not len(df) else df.astype(object).where(df.notna(), None).to_dict("records")

        return json_safe({
            "schema_version": JSON_SCHEMA_VERSION, "kind": "fleet", "min_ms": self.min_ms,
            "sessions": len(self.summaries), "analyzed": len(self.ok), "failed": len(self.errors),
            "stalls": int(sum(s["analysis"]["stalls"]["count"] for s in self.ok)),
            "stall_ms": float(sum(s["analysis"]["stalls"]["total_ms"] for s in self.ok)),
            "hosts": records(self.hosts()), "filesystems": records(self.filesystems()),
            "distributions": records(self.distributions()), "histograms": records(self.histograms()),
            "writers": records(self.writers()), "rows": records(self.rows), "errors": records(self.errors),
        })

    def text(self, top: int = 20) -> str:
        """The summary ``jstall fleet`` prints."""

        def f(v, fmt="{:.1f}"):
            return "-" if v is None or pd.isna(v) else fmt.format(v)

        out = []
        n_st = sum(s["analysis"]["stalls"]["count"] for s in self.ok)
        ms = sum(s["analysis"]["stalls"]["total_ms"] for s in self.ok)
        hosts = self.hosts()
        out.append(f"{len(self.summaries)} sessions ({len(self.errors)} failed to load) from {len(hosts)} hosts: "
                   f"{n_st} stalls (calls >= {self.min_ms:g} ms), {ms / 1000:.1f} s of stall time.")
        if len(hosts):
            out.append("")
            out.append(f"worst hosts (by stall time; top {min(top, len(hosts))} of {len(hosts)})")
            out.append(text_table(["host", "sessions", "stalls", "stall ms", "ms/hour", "worst ms", "forced cp",
                                   "headroom low", "cause"],
                                  [[h["host"], h["sessions"], h["stalls"], f(h["stall_ms"], "{:.0f}"),
                                    f(h["stall_ms_per_hour"], "{:.0f}"), f(h["max_stall_ms"]), h["forced_checkpoints"],
                                    f(h["headroom_low_blocks"], "{:.0f}"), _label(h["dominant_cause"])]
                                   for _, h in hosts.head(top).iterrows()]))
        fsys = self.filesystems()
        if len(fsys):
            out.append("")
            out.append(f"worst filesystems (top {min(top, len(fsys))} of {len(fsys)})")
            rows = [[r["host"], r["dev"] or "-", (r["mountpoint"] or "-")[-32:], f(r["journal_mib"], "{:g}"),
                     f(r["inode_size"], "{:.0f}"), r["sessions"], r["stalls"], f(r["stall_ms"], "{:.0f}"),
                     r["forced_checkpoints"], f(r["headroom_low_blocks"], "{:.0f}"), _label(r["dominant_cause"])]
                    for _, r in fsys.head(top).iterrows()]
            out.append(text_table(["host", "dev", "mount point", "journal MiB", "inode", "sessions", "stalls",
                                   "stall ms", "forced cp", "headroom low", "cause"], rows))
        ws = self.writers()
        if len(ws):
            out.append("")
            out.append(f"who fills the journals (cgroups by their share of what the fleet logged; top "
                       f"{min(top, len(ws))} of {len(ws)})")
            out.append(text_table(["cgroup", "journal", "logged", "share %", "sessions", "hosts", "stall ms"],
                                  [[r["cgroup"], r["journal_kind"], f"{r['logged']:,.0f} {r['unit']}",
                                    f(r["share_pct"]), r["sessions"], _hosts(r["hosts"]), f(r["stall_ms"], "{:.0f}")]
                                   for _, r in ws.head(top).iterrows()]))
        dist = self.distributions()
        if len(dist):
            out.append("")
            out.append("latency per call over the fleet (log2 histograms added; p50/p99: upper bound of "
                       "the bucket holding the rank)")
            out.append(text_table(["call", "count", "sessions", "p50 ms", "p99 ms", "max ms"],
                                  [[r["syscall"], r["count"], r["sessions"], f(r["p50_ms"], "{:.3f}"),
                                    f(r["p99_ms"], "{:.3f}"), f(r["max_ms"])] for _, r in dist.iterrows()]))
        if len(self.rows):
            out.append("")
            out.append(f"sessions and journals (top {min(top, len(self.rows))} of {len(self.rows)} by stall time; "
                       "--json lists all)")
            out.append(text_table(["session", "host", "dev", "MiB", "inode", "s", "calls", "stalls", "stall ms",
                                   "cause", "headroom", "forced cp", "first recommendation"],
                                  [[_short(r["session"]), r["host"], r["dev"] or "-", f(r["journal_mib"], "{:g}"),
                                    f(r["inode_size"], "{:.0f}"), f(r["duration_s"]), r["calls"], r["stalls"],
                                    f(r["stall_ms"], "{:.0f}"), _label(r["dominant_cause"]),
                                    f(r["headroom_low_blocks"], "{:.0f}"), r["forced_checkpoints"],
                                    (r["top_recommendation"] or "-")] for _, r in self.rows.head(top).iterrows()]))
        if len(self.errors):
            out.append("")
            out.append(f"sessions that failed to load ({len(self.errors)})")
            for _, e in self.errors.iterrows():
                out.append(f"- {e['session']}: {e['error']}")
        return "\n".join(out) + "\n"


def _hosts(hosts, n=3):
    """The first ``n`` host names, and how many more."""
    return ", ".join(hosts[:n]) + (f" +{len(hosts) - n}" if len(hosts) > n else "")


def _short(path, n=40):
    path = str(path)
    return path if len(path) <= n else "…" + path[-(n - 1):]
