"""jstall.analyzer: tie every stall to its cause, the journal's fill level and its size.

The public API (imported lazily, so ``jstall`` starts fast)::

    from jstall.analyzer import load_session, analyze, analyze_sweep
    a = analyze("SESSION_DIR", min_ms=10)   # an Analysis: .stalls, .journals, ... DataFrames
    a.to_dict()                              # the JSON document of docs/analysis.md

Modules: load (session -> DataFrames), causes, fill, stalls, journals, calls, recommend,
analysis (all of it for one session), sweep, text, figures, report; analyze_cmd and
report_cmd are the command-line entries.
"""

_LAZY = {
    "load_session": "load",
    "Session": "load",
    "analyze": "analysis",
    "Analysis": "analysis",
    "analyze_sweep": "sweep",
    "CAUSES": "causes",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_LAZY)
