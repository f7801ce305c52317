"""The arithmetic of benchmarks/advice_accuracy.py, apart from its runs: pure functions on
the results it keeps (one JSON object per line, one line per run), so the judging can be
checked on hand-built results and a run killed half-way resumes from its file.

A run's record: ``workload``, ``scale``, ``iops`` (the paced device's write IOPS), ``config``
("baseline" or a remedy's label), ``run`` (1, 2, 3), ``kind`` (the remedy's advice kind;
None for the baseline), ``change`` (the lab's FsConfig fields it changed), ``stall_ms``
(analyze's JSON ``stalls.total_ms``: every stalled call, every cause), ``durable_s`` (the
lab's phases' durable time, summed), and on baseline runs ``advice`` (advice_of: the
remedies analyze named, ranked), ``verdict`` (analyze's top-level ``verdict`` object, or
None) and ``stall_ms_by_comm`` ({process name: stall ms}: the tenant remedy, which moves a
process and its stalls to a filesystem of its own, is judged on the others' stall time).
A tune's record: ``config`` "tune", ``run``, ``threshold_mib`` (lab tune's smallest journal
big enough; None when none up to its bound was) and ``points`` (each size its search ran:
``journal_mib``, ``stall_ms``, the mechanism's ``waits_ms``), against which the log-size
remedy's predicted curve is judged (target 5, :func:`curve_points`).

A client that runs for a fixed time (dbench -t) does as much work as its waits let it: a
remedy that shrinks them leaves it more calls, each with its share of stall time. Its runs
carry ``per_call`` and ``calls`` (the calls jstall traced on the filesystem, analyze's JSON
``calls`` counts), and each run's stall time is judged at the baseline's median number of
calls (:func:`at_baseline_calls`).

A run's ``work`` is what the lab's census found on the filesystem at its end (files,
directories, extended attributes: :func:`work_of`). Every run of a case does the same work,
but a client may not: fs_mark -t 2 in one directory once opened its 40,005 files and left
20,001 (its two threads' names collided), and that baseline stalled 0 ms against 6.5 s. A
run whose work differs from its case's (the work most of the case's runs did,
:func:`usual_work`) measures something else: the runner runs it again, and the judge leaves
out any left (:func:`other_work`), counted in the report. A remedy that moves a process to a
filesystem of its own takes its work with it, and is not compared.

What the advice predicts is read from analyze's JSON (advice_of): per recommendation
``stall_ms_removed_low`` and ``stall_ms_removed_high`` (stall time over all causes and tasks
the change would remove), ``regime``, ``cost`` and ``command``. Where a recommendation does
not carry them yet, its printed range stands in: ``inputs.removed_low_ms`` and
``removed_high_ms`` where it gives them, else ``stall_ms_addressed`` as both ends (its
``source`` is then "fallback"), and the journal model's ``inputs.regime``.
"""

import json
import os
import statistics

#: kinds that are findings about the recording, not changes
FINDINGS = ("lost_events", "no_stalls", "untraced_checkpoints")
#: the kinds of advice that name a change to the filesystem
CHANGES = (
    "journal_size",
    "inode_size",
    "external_journal",
    "fast_commit",
    "log_size",
    "log_buffers",
    "external_log",
    "xfs_log_device",
    "commit_interval",
    "writeback_window",
    "own_filesystem",
)
#: a remedy "removes most" of the stall time at this share (target 2)
MOST = 0.9
#: calibration: an interval is narrow enough when high <= WIDTH x low, or, under SMALL_MS,
#: when it is within +- PLUS_MINUS_MS of its middle (high - low <= 2 x PLUS_MINUS_MS)
WIDTH, SMALL_MS, PLUS_MINUS_MS = 2.0, 2000.0, 1000.0
#: inside an interval to the whole ms the advice prints
ROUNDING_MS = 0.5
#: the targets' shares
CALIBRATION_SHARE, HEADLINE_SHARE, JOURNAL_SHARE = 0.8, 0.9, 0.9
#: target 3: the journal (log) size at most this many times the median of the tunes' thresholds
JOURNAL_RATIO = 2.0
RUNS = 3


def schedule(configs, runs=RUNS):
    """[(config, run)] in the order they run: the configurations interleaved, round after
    round (B R1 R2 B R1 R2 ...), so a machine's drift falls on all of them alike."""
    return [(c, r) for r in range(1, runs + 1) for c in configs]


def median(values):
    """The median of the values that are not None (None when there are none)."""
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def key(rec):
    """The record's identity: (workload, scale, iops, config, run)."""
    return (rec["workload"], rec["scale"], int(rec["iops"]), rec["config"], int(rec["run"]))


def case_of(rec):
    return (rec["workload"], rec["scale"], int(rec["iops"]))


def read_results(path):
    """(records, bad lines) of a results file: one JSON object per line; a line that does not
    parse (a run killed while writing it) is left out and counted; a later record of the
    same key replaces an earlier one. No file: ([], 0)."""
    by, bad = {}, 0
    if not os.path.exists(path):
        return [], 0
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                k = key(rec)
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            by[k] = rec
    return list(by.values()), bad


def append_result(path, rec):
    """Add one run's record to the results file, written whole and flushed to disk."""
    line = json.dumps(rec, sort_keys=True) + "\n"
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _num(x):
    return None if x is None else float(x)


def advice_of(doc):
    """The remedies of analyze's JSON document, in its rank order: [{"kind", "rank" (1 the
    first remedy), "low_ms", "high_ms", "total_ms", "mechanism_ms", "regime", "cost",
    "command", "journal_size_mib", "source" ("model" when the recommendation carries the
    stall-time interval, else "fallback")}]. Findings about the recording are left out."""
    out = []
    for r in doc.get("recommendations") or []:
        if r.get("kind") in FINDINGS:
            continue
        inputs = r.get("inputs") or r.get("values") or {}
        if r.get("stall_ms_removed_low") is not None:
            low, high, source = r["stall_ms_removed_low"], r.get("stall_ms_removed_high"), "model"
            high = low if high is None else high
        elif inputs.get("removed_low_ms") is not None:
            low, high, source = inputs["removed_low_ms"], inputs.get("removed_high_ms"), "fallback"
            high = low if high is None else high
        else:
            low = high = r.get("stall_ms_addressed") or 0.0
            source = "fallback"
        regime = r.get("regime") or inputs.get("regime")
        out.append(
            {
                "kind": r["kind"],
                "rank": len(out) + 1,
                "low_ms": _num(low),
                "high_ms": _num(high),
                "total_ms": _num(r.get("stall_ms_total")),
                "mechanism_ms": _num(r.get("mechanism_ms_removed")),
                "regime": regime.replace(" ", "_") if isinstance(regime, str) else None,
                "cost": r.get("cost"),
                "command": r.get("command"),
                "journal_size_mib": _num(r.get("journal_size_mib")),
                "source": source,
                # the tenant remedy: the process it moves (by name: pids differ between runs)
                "moved": inputs.get("comm") if r["kind"] == "own_filesystem" else None,
                "curve": _curve_inputs(r, inputs),
            }
        )
    return out


def _curve_inputs(r, inputs):
    """What a log-size remedy's predicted curve is drawn from (advice.curve.size_curve): the
    current size, the mechanism's waits there and the model's two bounds; None for another
    remedy or one without a size."""
    if not inputs.get("curve") or r["kind"] not in ("journal_size", "log_size"):
        return None
    if r["kind"] == "journal_size":
        cur, lo, hi = inputs.get("journal_mib"), inputs.get("low_mib"), inputs.get("high_mib")
    else:
        cur, lo = inputs.get("log_mib"), r.get("journal_size_mib")
        hi = lo
    if None in (cur, lo, hi):
        return None
    return {"current_mib": _num(cur), "wait_ms": _num(r.get("mechanism_ms_removed") or 0.0),
            "low_mib": _num(lo), "high_mib": _num(hi)}


def is_remedy(a):
    """The advice names a change (a kind of CHANGES, or one that states its cost to apply),
    not a finding about a cause (the per-cause notes: cpu, other, data_writeback...)."""
    return a["kind"] in CHANGES or bool(a.get("cost"))


def signature(advice):
    """What must not change between identical runs (target 4): the remedies' kinds in their
    rank order (the per-cause findings between them left out)."""
    return tuple(a["kind"] for a in advice if is_remedy(a))


def narrow(low, high):
    """The interval is no wider than the target allows: high <= 2 x low, or, under 2 s, within
    +- 1 s (high - low <= 2 s)."""
    if low is None or high is None:
        return False
    if high < SMALL_MS:
        return high - low <= 2 * PLUS_MINUS_MS
    return low > 0 and high <= WIDTH * low


def inside(measured, low, high):
    """The measured removal lies in [low, high], to the precision the advice prints (whole ms,
    ROUNDING_MS: analyze's JSON rounds per-process stall time to µs, so a remedy that removes
    every stall measures a hair past the interval's end it predicted from the same stalls)."""
    return None not in (measured, low, high) and low - ROUNDING_MS <= measured <= high + ROUNDING_MS


def says_none_removes_most(verdict):
    """The verdict says no filesystem option removes most of the stall time: its
    ``filesystem_removes_most`` is false, or a text of it says "no filesystem option"."""
    if not isinstance(verdict, dict):
        return False
    if verdict.get("filesystem_removes_most") is False:
        return True
    return any(isinstance(v, str) and "no filesystem option" in v.lower() for v in verdict.values())


def headline_kind(verdict, advice, tried):
    """The remedy the advice leads with: the verdict's ``remedy`` (or ``kind``) when it names
    one, else the first-ranked remedy that was tried."""
    if isinstance(verdict, dict):
        for k in ("remedy", "kind", "headline"):
            v = verdict.get(k)
            if isinstance(v, dict):
                v = v.get("kind")
            if isinstance(v, str) and v:
                return v
    return next((a["kind"] for a in advice if a["kind"] in tried), None)


#: the lab's census fields that say what work a run did (its bytes include clients' own logs,
#: whose timings differ run to run)
WORK_FIELDS = ("files", "dirs", "attrs")


def work_of(census):
    """The work a run did (a tuple of WORK_FIELDS) from the lab's census, or None."""
    if not census:
        return None
    return tuple(int(census.get(f) or 0) for f in WORK_FIELDS)


def _compared(rec):
    return rec.get("config") != "tune" and rec.get("work") is not None and not rec.get("moved_work")


def usual_work(records, case):
    """The work most of ``case``'s compared runs did (ties: the earliest key's), or None."""
    counts = {}
    for r in sorted(records, key=key):
        if case_of(r) == case and _compared(r):
            w = tuple(r["work"])
            counts[w] = counts.get(w, 0) + 1
    return max(counts, key=counts.get) if counts else None


def other_work(records):
    """[record] of the runs whose work differs from their case's usual work (usual_work)."""
    usual = {c: usual_work(records, c) for c in {case_of(r) for r in records}}
    return [r for r in records if _compared(r) and tuple(r["work"]) != usual[case_of(r)]]


def cases(records):
    """{(workload, scale, iops): case} of the records: each case's ``baseline`` and
    ``remedies`` ({config: {"kind", "change", "stall_ms": [by run], "durable_s": [...]}}), the
    advice of each baseline run (``advice``: {run: [...]}, ``verdicts``: {run: ...}) and
    ``thresholds`` (the tunes'). Runs that did other work than their case's (other_work) are
    left out."""
    out = {}
    skip = {key(r) for r in other_work(records)}
    for rec in sorted(records, key=key):
        if key(rec) in skip:
            continue
        c = out.setdefault(
            case_of(rec),
            {
                "baseline": {"stall_ms": {}, "durable_s": {}, "by_comm": {}},
                "remedies": {},
                "advice": {},
                "verdicts": {},
                "thresholds": {},
            },
        )
        run = int(rec["run"])
        if rec["config"] == "tune":
            c["thresholds"][run] = rec.get("threshold_mib")
            c.setdefault("points", {})[run] = rec.get("points") or []
            continue
        if rec["config"] == "baseline":
            slot = c["baseline"]
            slot["by_comm"][run] = rec.get("stall_ms_by_comm") or {}
            c["advice"][run] = rec.get("advice") or []
            c["verdicts"][run] = rec.get("verdict")
        else:
            slot = c["remedies"].setdefault(
                rec["config"],
                {
                    "kind": rec.get("kind"),
                    "change": rec.get("change"),
                    "stall_ms": {},
                    "durable_s": {},
                },
            )
        slot["stall_ms"][run] = rec.get("stall_ms")
        slot["durable_s"][run] = rec.get("durable_s")
        slot.setdefault("calls", {})[run] = rec.get("calls")
        c["per_call"] = c.get("per_call", False) or bool(rec.get("per_call"))
    return out


def at_baseline_calls(c):
    """Case ``c`` (of :func:`cases`) with each run's stall time scaled to the baseline's median
    number of calls, where its client runs for a fixed time (``per_call``) and every run's
    calls are known; else ``c`` as it is."""
    slots = [c["baseline"], *c["remedies"].values()]
    calls = [n for slot in slots for n in slot.get("calls", {}).values()]
    if not c.get("per_call") or not calls or any(not n for n in calls):
        return c
    ref = median(c["baseline"]["calls"].values())

    def scaled(slot):
        ms = {run: None if v is None else v * ref / slot["calls"][run] for run, v in slot["stall_ms"].items()}
        return {**slot, "stall_ms": ms}

    return {**c, "baseline": scaled(c["baseline"]),
            "remedies": {k: scaled(v) for k, v in c["remedies"].items()}, "at_calls": ref}


def predicted(advice_by_run, kind):
    """The interval the baseline runs' advice printed for ``kind``, with the first run's rank
    and moved process. Each run's interval is a part of that run's own stall time
    (``total_ms``), and the measured removal is of the median run's: so the medians of the
    runs' shares of their own stall time (low and high), times the median stall time; where a
    run's total is unknown, or the remedy moves a process (its interval is a part of the
    others' stall time), the medians of the lows and of the highs."""
    runs = [next((a for a in advice_by_run[n] if a["kind"] == kind), None) for n in sorted(advice_by_run)]
    runs = [a for a in runs if a is not None]
    if not runs:
        return {}
    low, high = median(a["low_ms"] for a in runs), median(a["high_ms"] for a in runs)
    if not runs[0].get("moved") and all(a.get("total_ms") and None not in (a["low_ms"], a["high_ms"])
                                        for a in runs):
        total = median(a["total_ms"] for a in runs)
        low = total * median(a["low_ms"] / a["total_ms"] for a in runs)
        high = total * median(a["high_ms"] / a["total_ms"] for a in runs)
    return {**runs[0], "low_ms": low, "high_ms": high, "advised_runs": len(runs)}


def pairs(cs):
    """[pair] of every (case, remedy) with runs: the predicted interval (:func:`predicted`:
    the medians of the baseline runs' printed intervals), the medians of stall and durable
    time of the baseline and of the remedy, the measured removal (baseline median - remedy
    median), its share of the baseline's, ``inside`` and ``narrow``."""
    out = []
    for ck, c in sorted(cs.items()):
        c = at_baseline_calls(c)
        first = c["advice"].get(1) or next(iter(c["advice"].values()), [])
        by_kind = {a["kind"]: predicted(c["advice"], a["kind"]) for a in first}
        b_dur = median(c["baseline"]["durable_s"].values())
        for config, r in sorted(c["remedies"].items()):
            a = by_kind.get(r["kind"]) or {}
            r_stall = median(r["stall_ms"].values())
            b_runs = c["baseline"]["stall_ms"]
            if a.get("moved"):
                # a process moved to a filesystem of its own takes its stalls there: the
                # baseline's stall time without them (the remedy's run records only this one)
                b_runs = {
                    n: ms - (c["baseline"]["by_comm"].get(n) or {}).get(a["moved"], 0.0)
                    for n, ms in b_runs.items()
                    if ms is not None
                }
            b_stall = median(b_runs.values())
            removed = None if None in (b_stall, r_stall) else b_stall - r_stall
            low, high = a.get("low_ms"), a.get("high_ms")
            out.append(
                {
                    "workload": ck[0],
                    "scale": ck[1],
                    "iops": ck[2],
                    "config": config,
                    "kind": r["kind"],
                    "rank": a.get("rank"),
                    "low_ms": low,
                    "high_ms": high,
                    "source": a.get("source"),
                    "baseline_stall_ms": b_stall,
                    "stall_ms": r_stall,
                    "removed_ms": removed,
                    "removed_share": removed / b_stall if removed is not None and b_stall else None,
                    "baseline_runs_ms": _sorted(b_runs.values()),
                    "runs_ms": _sorted(r["stall_ms"].values()),
                    "baseline_durable_s": b_dur,
                    "durable_s": median(r["durable_s"].values()),
                    "runs": (len(c["baseline"]["stall_ms"]), len(r["stall_ms"])),
                    "complete": min(len(c["baseline"]["stall_ms"]), len(r["stall_ms"])) >= RUNS,
                    "inside": inside(removed, low, high),
                    "narrow": narrow(low, high),
                    "spread_ms": spread(b_runs.values(), r["stall_ms"].values()),
                    "at_calls": c.get("at_calls"),
                }
            )
    return out


def spread(baseline_runs, remedy_runs):
    """How far the runs alone move a measured removal (ms): half the range of the baseline's
    runs' stall time plus half the remedy's (None without two runs of each). A removal
    measured from medians of 3 runs is no surer than this."""
    b, r = _sorted(baseline_runs), _sorted(remedy_runs)
    if len(b) < 2 or len(r) < 2:
        return None
    return (b[-1] - b[0]) / 2 + (r[-1] - r[0]) / 2


def resolved(p):
    """The runs resolve the pair's interval: their spread (:func:`spread`) is no wider than
    the interval. Where it is wider, whether the median removal falls inside is the runs'
    noise, not the model's."""
    return None not in (p["spread_ms"], p["low_ms"], p["high_ms"]) and p["spread_ms"] <= p["high_ms"] - p["low_ms"]


def _sorted(values):
    return sorted(v for v in values if v is not None)


def _span(xs):
    """'lowest-highest' of the runs' stall ms (the noise the medians stand in)."""
    return "" if not xs else f"{xs[0] / 1e3:.1f}-{xs[-1] / 1e3:.1f}"


def calibration(ps):
    """Target 1: (hits, pairs, inside, narrow) over the pairs with all their runs: a hit lies
    inside a narrow enough interval."""
    ps = [p for p in ps if p["removed_ms"] is not None and p["complete"]]
    return (
        sum(p["inside"] and p["narrow"] for p in ps),
        len(ps),
        sum(bool(p["inside"]) for p in ps),
        sum(bool(p["narrow"]) for p in ps),
    )


def calibration_resolved(ps):
    """Target 1 over the pairs the runs resolve (:func:`resolved`): (hits, pairs)."""
    ps = [p for p in ps if p["removed_ms"] is not None and p["complete"] and resolved(p)]
    return sum(p["inside"] and p["narrow"] for p in ps), len(ps)


def headline(cs, ps):
    """Target 2: [(case, "most" or "none", hit, headline kind, best share)] per case with
    every remedy's runs done: where a tried remedy removed >= 90 % of the stall time, the hit is the
    headline remedy removing that much too; where none did, the verdict saying no filesystem
    option removes most of it."""
    out = []
    for ck, c in sorted(cs.items()):
        mine = [
            p
            for p in ps
            if (p["workload"], p["scale"], p["iops"]) == ck and p["removed_share"] is not None
        ]
        if not mine or not all(p["complete"] for p in mine):
            continue
        best = max(p["removed_share"] for p in mine)
        first = c["advice"].get(1) or []
        verdict = c["verdicts"].get(1)
        head = headline_kind(verdict, first, {p["kind"] for p in mine})
        if best >= MOST:
            share = next((p["removed_share"] for p in mine if p["kind"] == head), None)
            out.append((ck, "most", share is not None and share >= MOST, head, best))
        else:
            out.append((ck, "none", says_none_removes_most(verdict), head, best))
    return out


def journal_sizes(cs):
    """Target 3: [(case, size MiB, median threshold MiB or None, hit)] of the hot-set cases
    (the first baseline run's journal_size or log_size advice in the hot_set regime) that
    have three tunes; a hit: size <= 2 x the median threshold."""
    out = []
    for ck, c in sorted(cs.items()):
        first = c["advice"].get(1) or []
        js = next(
            (
                a
                for a in first
                if a["kind"] in ("journal_size", "log_size") and a["regime"] == "hot_set"
            ),
            None,
        )
        if js is None or not js.get("journal_size_mib") or len(c["thresholds"]) < RUNS:
            continue
        thr = [t for t in c["thresholds"].values() if t is not None]
        m = (
            median(thr) if len(thr) == len(c["thresholds"]) else None
        )  # a tune with none big enough: no median
        out.append(
            (
                ck,
                js["journal_size_mib"],
                m,
                m is not None and js["journal_size_mib"] <= JOURNAL_RATIO * m,
            )
        )
    return out


#: target 5: a tune's measured stall time within this factor of the predicted curve's
#: interval at its size, or within CURVE_SLACK_MS of it (the tenths of a second the verdict
#: prints: a point of a few ms is no measure of a factor)
CURVE_RATIO, CURVE_SLACK_MS = 2.0, 100.0


def curve_points(cs):
    """Target 5: [(case, size MiB, measured stall ms, predicted low, predicted high, hit)] of
    every point the tunes of a case ran whose first baseline run's log-size remedy carries a
    curve: the curve (advice.curve.size_curve, from that remedy's figures) at the point's
    size, and a hit where the measured stall time lies within CURVE_RATIO of its interval
    (low / 2 <= measured <= 2 x high, give or take CURVE_SLACK_MS)."""
    from jstall.analyzer.advice.curve import size_curve

    out = []
    for ck, c in sorted(cs.items()):
        first = c["advice"].get(1) or []
        js = next((a for a in first if a["kind"] in ("journal_size", "log_size") and a.get("curve")), None)
        pts = [p for run in sorted(c.get("points") or {}) for p in c["points"][run]
               if p.get("journal_mib") and p.get("stall_ms") is not None]
        if js is None or not pts:
            continue
        k = js["curve"]
        t = size_curve(k["current_mib"], k["wait_ms"], k["low_mib"], k["high_mib"], js["total_ms"] or 0.0,
                       js["low_ms"] or 0.0, js["high_ms"] or 0.0, [p["journal_mib"] for p in pts])
        for p, row in zip(pts, t.to_dict("records")):
            lo, hi, m = row["stall_ms_low"], row["stall_ms_high"], float(p["stall_ms"])
            hit = lo / CURVE_RATIO - CURVE_SLACK_MS <= m <= hi * CURVE_RATIO + CURVE_SLACK_MS
            out.append((ck, float(p["journal_mib"]), m, lo, hi, hit))
    return out


def stability(cs):
    """Target 4: [(case, same)] of the cases with three baseline runs: the remedies' kinds
    and ranks identical in all three, and so the verdict's headline remedy and whether it
    says no filesystem option removes most of the stall time."""
    out = []
    for ck, c in sorted(cs.items()):
        if len(c["advice"]) >= RUNS:
            seen = set()
            for run, a in c["advice"].items():
                v = c["verdicts"].get(run)
                rem = [x for x in a if is_remedy(x)]
                head = headline_kind(v, rem, {x["kind"] for x in rem})
                seen.add((signature(a), head, says_none_removes_most(v)))
            out.append((ck, len(seen) == 1))
    return out


def share(hits, n):
    return hits / n if n else None


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.0f} %"


def _ms(x):
    return "" if x is None else f"{x:,.0f}"


HEADER = (
    "| workload | scale | write IOPS | remedy (rank) | predicted removal ms | baseline stall ms "
    "| measured removal ms (share) | inside | runs' stall s baseline; remedy "
    "| durable s baseline -> remedy |"
)


def table(ps):
    """The markdown table of every pair."""
    rows = [HEADER, "|---|---|---:|---|---:|---:|---:|---|---:|---:|"]
    for p in ps:
        low, high = p["low_ms"], p["high_ms"]
        pred = _ms(low) if low == high else f"{_ms(low)}-{_ms(high)}"
        b, d = p["baseline_durable_s"], p["durable_s"]
        dur = "" if None in (b, d) else f"{b:.1f} -> {d:.1f}"
        ok = "yes" if p["inside"] else "no"
        if not p["complete"]:
            ok += f" ({min(p['runs'])} of {RUNS} runs: not judged)"
        if p["inside"] and not p["narrow"]:
            ok += " (wider than 2x)"
        if p["complete"] and p["spread_ms"] is not None and not resolved(p):
            ok += f" (runs spread {_ms(p['spread_ms'])})"
        per = f", at {p['at_calls']:,.0f} calls" if p.get("at_calls") else ""
        removed = f"{_ms(p['removed_ms'])} ({_pct(p['removed_share'])}{per})"
        rows.append(
            f"| {p['workload']} | {p['scale']} | {p['iops']:,} "
            f"| {p['config']} ({p['rank'] or '-'}) "
            f"| {pred} | {_ms(p['baseline_stall_ms'])} | {removed} | {ok} "
            f"| {_span(p['baseline_runs_ms'])}; {_span(p['runs_ms'])} | {dur} |"
        )
    return "\n".join(rows)


def targets(cs):
    """[(target line, met or None when nothing was measured for it)] of the five targets."""
    ps = pairs(cs)
    hits, n, ins, nar = calibration(ps)
    s = share(hits, n)
    line1 = (
        f"1. calibration: {hits} of {n} (workload, remedy) pairs measured inside a narrow enough "
        f"interval ({_pct(s)}; target >= {CALIBRATION_SHARE:.0%}); {ins} inside, {nar} narrow "
        "enough"
    )
    rh, rn = calibration_resolved(ps)
    line1 += (f"; over the {rn} pairs whose runs spread less than their interval is wide, {rh} "
              f"({_pct(share(rh, rn))}); the other {n - rn}: the runs alone move the removal more than the "
              "interval is wide")
    out = [(line1, None if s is None else s >= CALIBRATION_SHARE)]
    h = headline(cs, ps)
    most = [x for x in h if x[1] == "most"]
    none = [x for x in h if x[1] == "none"]
    hit_most, hit_none = sum(x[2] for x in most), sum(x[2] for x in none)
    s_most, s_none = share(hit_most, len(most)), share(hit_none, len(none))
    met = None
    if h:
        met = (s_most is None or s_most >= HEADLINE_SHARE) and (s_none is None or s_none == 1.0)
    line2 = (
        f"2. headline: where a tried remedy removed >= {MOST:.0%} ({len(most)} workloads), the "
        f"headline one did in {hit_most} ({_pct(s_most)}; target >= {HEADLINE_SHARE:.0%}); where "
        f"none did ({len(none)}), the verdict said no filesystem option removes most in {hit_none}"
    )
    out.append((line2, met))
    j = journal_sizes(cs)
    out.append(_share_target(
        f"3. journal size <= {JOURNAL_RATIO:g}x the median of {RUNS} tunes' thresholds: {{hits}} of "
        f"{len(j)} hot-set workloads tuned", sum(x[3] for x in j), len(j)))
    st = stability(cs)
    line4 = (
        f"4. identical verdicts (remedy kinds and ranks) on {RUNS} identical runs: "
        f"{sum(x[1] for x in st)} of {len(st)} workloads"
    )
    out.append((line4, None if not st else all(x[1] for x in st)))
    cp = curve_points(cs)
    out.append(_share_target(
        f"5. the predicted curve (stall time by journal or log size) within {CURVE_RATIO:g}x of the tunes' "
        f"measured points: {{hits}} of {len(cp)} points, {len({x[0] for x in cp})} workloads",
        sum(x[5] for x in cp), len(cp)))
    return out


def _share_target(text, hits, n):
    """(line, met) of a target met by JOURNAL_SHARE of its ``n`` cases: ``text`` with
    ``{hits}`` filled, then the share and the target."""
    s = share(hits, n)
    return (text.format(hits=hits) + f" ({_pct(s)}; target >= {JOURNAL_SHARE:.0%})",
            None if s is None else s >= JOURNAL_SHARE)


def curve_table(cp):
    """The markdown table of target 5's points."""
    rows = ["| workload | scale | write IOPS | journal MiB | predicted stall ms | tune's stall ms | within 2x |",
            "|---|---|---:|---:|---:|---:|---|"]
    for ck, mib, m, lo, hi, hit in cp:
        pred = _ms(lo) if round(lo) == round(hi) else f"{_ms(lo)}-{_ms(hi)}"
        rows.append(f"| {ck[0]} | {ck[1]} | {ck[2]:,} | {mib:g} | {pred} | {_ms(m)} | {'yes' if hit else 'no'} |")
    return "\n".join(rows)
