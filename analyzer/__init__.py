"""jstall.analyzer: tie every stall to its cause, the journal's fill level and its size.

The public API::

    from jstall.analyzer import load_session, analyze, analyze_sweep
    a = analyze("SESSION_DIR", min_ms=10)   # an Analysis: .stalls, .journals, ... DataFrames
    a.to_dict()                              # the JSON document of docs/analysis.md

The layers, each a subpackage that imports only those before it: ``session`` (a session's
tables, windows, what was recorded) -> ``stalls`` (causes, chains, the stall table, calls,
processes, devices) with ``jbd2`` and ``xfs`` (each journal kind's analysis; neither imports
the other) -> ``advice`` (the recommendation rules) -> ``analysis`` and ``summary`` (one
session's whole analysis and its view model) -> ``multi`` (sweep, compare, fleet) -> ``render``
(text, figures, HTML pages) -> ``commands`` (analyze, report, compare, fleet).
"""

_LAZY = {
    "load_session": "session.load",
    "Session": "session.load",
    "analyze": "analysis",
    "Analysis": "analysis",
    "analyze_sweep": "multi.sweep",
    "CAUSES": "stalls.causes",
}


# Deferred on purpose: the monitor imports jstall.analyzer.stalls.causes (no pandas), and this
# package's own import must not pull pandas and the whole analysis in with it.
def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_LAZY)
