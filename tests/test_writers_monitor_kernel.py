"""Who fills the journal, live: `jstall monitor` on a real paced ext4 shared by two real
cgroup v2 cgroups, scraped by a real Prometheus, with `jstall top --url` in tmux. Two phases on
one filesystem: the culprit (an xattr storm, in a kubepods-style pod path) alone, filling the
journal and stalling on it itself; then the culprit again beside a victim (4 KiB write +
fdatasync every 5 ms, in a systemd-style scope) that stalls on the checkpoints the culprit's
blocks force. The monitor's writers and stall seconds by cgroup, the alert rule on one cgroup
filling a journal while others stall (promtool on each phase's scraped series), top's pane and
the dashboard's metrics are checked against that run."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from jstall.workloads.scratch import FsConfig, ScratchFs

import cgroup_pair
from cgroup_pair import CULPRIT_NAME, VICTIM, VICTIM_NAME, in_cgroup
from conftest import leftovers
from test_monitor_kernel import (check_alert_rules, end_all, free_port, get, one, prometheus_dir, query_range,
                                 start_prometheus, wait_for)

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
CONFIG = FsConfig(fs_size="64M", journal_size="4M", inode_size=128, block_size=1024, write_iops=2000)
FILES, UPDATES = 3000, 6000
SERIES = ("jstall_journal_logged_blocks_total", "jstall_cgroup_stall_seconds_total")
RULE = "JstallJournalFilledByOneCgroup"


def culprit(cg, directory):
    return subprocess.run(in_cgroup(cg, [sys.executable, os.path.join(HERE, "xattr_workload.py"), directory,
                                         str(FILES), str(UPDATES)]),
                          capture_output=True, text=True, timeout=600, check=True)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not cgroup_pair.available():
        pytest.skip("no cgroup v2 hierarchy at " + cgroup_pair.ROOT)
    tmp = tmp_path_factory.mktemp("writers-monitor")
    scratch = f"/var/tmp/jstall-test-{uuid.uuid4().hex[:10]}"
    port_m, port_p = free_port(), free_port()
    prom_dir = prometheus_dir(tmp, port_m)
    tmux = ["tmux", "-L", f"jstall-test-{uuid.uuid4().hex[:8]}"]
    procs, cgs = {}, {"victim": "/nonexistent/a/b"}
    out = {"tmp": tmp, "port_p": port_p, "instance": f"127.0.0.1:{port_m}"}
    try:
        with cgroup_pair.cgroup_pair() as cgs, ScratchFs(CONFIG, scratch_dir=scratch) as fs:
            mnt = out["mnt"] = fs.mountpoint
            out["dev"] = fs.dev
            subprocess.run(["sync", "-f", mnt], check=True)
            procs["prom"] = start_prometheus(prom_dir, port_p)
            procs["mon"] = subprocess.Popen(
                [JSTALL, "monitor", "-q", "-d", mnt, "--listen", f"127.0.0.1:{port_m}", "--capture-dir",
                 str(tmp / "caps"), "--trigger-ms", "100", "--before", "1", "--after", "1",
                 "--min-interval", "600"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            url = f"http://127.0.0.1:{port_m}/metrics"
            wait_for(lambda: "jstall_events_lost_total" in get(url), 120, "the monitor")
            wait_for(lambda: one(port_p, f'up{{instance="{out["instance"]}"}}') == 1, 60, "the first scrape")
            subprocess.run(tmux + ["new-session", "-d", "-s", "top", "-x", "170", "-y", "50",
                                   f"{JSTALL} top --url http://127.0.0.1:{port_m}"], check=True)
            # the culprit alone: it fills the journal and stalls on it itself
            w0 = time.time()
            culprit(cgs["culprit"], os.path.join(mnt, "alone"))
            subprocess.run(["sync", "-f", mnt], check=True)
            out["alone"] = (w0, time.time())
            time.sleep(6)   # apart: the phase's last 2-s read of writers and stalls lands in its window
            out["scrape_alone"] = get(url)
            # the culprit beside a victim
            stop = str(tmp / "stop")
            w0 = time.time()
            victim = subprocess.Popen(in_cgroup(cgs["victim"], [sys.executable, "-c", VICTIM,
                                                                 os.path.join(mnt, "victim.dat"), stop]))
            try:
                culprit(cgs["culprit"], os.path.join(mnt, "pair"))
            finally:
                open(stop, "w").close()
                assert victim.wait(timeout=60) == 0
            subprocess.run(["sync", "-f", mnt], check=True)
            out["pair"] = (w0, time.time())
            time.sleep(3)   # the writers' and stall seconds' 2-s read, a scrape, top's refresh
            out["pane"] = subprocess.run(tmux + ["capture-pane", "-p", "-t", "top"],
                                         capture_output=True, text=True).stdout
            out["scrape"] = get(url)
            out["status"] = json.loads(get(f"http://127.0.0.1:{port_m}/status.json"))
            q = f'sum(jstall_cgroup_stall_seconds_total{{device="{fs.dev}"}})'
            total = sum(v for k, v in _samples(out["scrape"], "jstall_cgroup_stall_seconds_total").items()
                        if k[0] == fs.dev)
            wait_for(lambda: one(port_p, q) == pytest.approx(total), 20, "Prometheus to scrape")
            out["series"] = {name: query_range(port_p, name, out["alone"][0] - 2, time.time()) for name in SERIES}
            out["rules"] = json.loads(get(f"http://127.0.0.1:{port_p}/api/v1/rules"))
            procs["mon"].send_signal(signal.SIGINT)
            out["mon_err"] = procs["mon"].communicate(timeout=120)[1]
            out["mon_rc"] = procs["mon"].returncode
    finally:
        end_all(tmux, procs)
        out["left"] = leftovers(scratch), os.path.exists(os.path.dirname(os.path.dirname(cgs["victim"])))
        if os.path.isdir(scratch) and not out["left"][0][1]:
            shutil.rmtree(scratch, ignore_errors=True)
    return out


def _samples(text, name):
    """{(device, cgroup): value} of one metric in a scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.labels["device"], s.labels["cgroup"]): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name}


def phase_window(phase):
    """(first second, seconds) of a phase's scraped samples: from the second before it began
    (the counters' values before it, or none) to 3 s after it ended (the monitor's last 2-s
    read of what it logged and stalled, and a scrape)."""
    start = round(phase[0]) - 1
    return start, round(phase[1]) + 3 - start + 1


def _phase_delta(series, phase):
    """{cgroup: increase over the phase} of the run's scraped series of one device."""
    start, n = phase_window(phase)
    out = {}
    for labels, points in series:
        before = [v for t, v in points.items() if t < start]
        during = [v for t, v in points.items() if start <= t < start + n]
        if during:
            out[labels["cgroup"]] = max(during) - (max(before) if before else 0.0)
    return out


def test_stall_seconds_by_cgroup_add_up_to_the_stall_seconds_by_cause(run):
    dev = run["dev"]
    by_cg = {cg: v for (d, cg), v in _samples(run["scrape"], "jstall_cgroup_stall_seconds_total").items() if d == dev}
    from prometheus_client.parser import text_string_to_metric_families

    by_cause = sum(s.value for fam in text_string_to_metric_families(run["scrape"]) for s in fam.samples
                   if s.name == "jstall_stall_seconds_total" and s.labels["device"] == dev)
    # the same off-CPU seconds of the same stalls, by cgroup instead of by cause
    assert by_cause > 0.2
    assert sum(by_cg.values()) == pytest.approx(by_cause, rel=1e-6), (by_cg, by_cause)
    # the victim stalled, under the name a person knows; the culprit did too (alone, its own
    # blocks forced its checkpoints)
    assert by_cg.get(VICTIM_NAME, 0) > 0 and by_cg.get(CULPRIT_NAME, 0) > 0, by_cg
    # bounded labels: at most --top-writers (5) names a device per interval, and the two
    # cgroups of the run among them
    assert len(by_cg) <= 12, by_cg
    assert run["mon_rc"] == 0 and "Traceback" not in run["mon_err"], run["mon_err"]


def test_the_culprit_fills_the_journal_in_both_phases(run):
    dev = run["dev"]
    logged = [s for s in run["series"]["jstall_journal_logged_blocks_total"] if s[0]["device"] == dev]
    stalls = [s for s in run["series"]["jstall_cgroup_stall_seconds_total"] if s[0]["device"] == dev]
    for phase in ("alone", "pair"):
        d = _phase_delta(logged, run[phase])
        share = d.get(CULPRIT_NAME, 0) / sum(d.values())
        print(f"{phase}: culprit's share {100 * share:.1f} % of {sum(d.values()):.0f} blocks; "
              f"stall s {_phase_delta(stalls, run[phase])}; {run[phase][1] - run[phase][0]:.1f} s")
        assert share >= 0.8, (phase, d)
    st = _phase_delta(stalls, run["pair"])
    assert st.get(VICTIM_NAME, 0) > 0, st


def test_the_filled_by_one_cgroup_rule_fires_beside_a_victim_and_not_alone(run, tmp_path):
    """promtool test rules on the shipped rule, fed each phase's scraped series (replayed for
    12 minutes as if the phase went on, then 12 minutes stopped): beside the victim it fires on
    the culprit; alone, the culprit filled the journal as much and stalled on it itself, but no
    other cgroup stalled, and it does not fire; stopped, it resolves."""
    dev = run["dev"]
    runs = [(lab, pts, None) for name in SERIES for lab, pts in run["series"][name] if lab["device"] == dev]
    for phase, fires in (("pair", True), ("alone", False)):
        start, cycle = phase_window(run[phase])
        culprit_alert = {"instance": run["instance"], "device": dev, "cgroup": CULPRIT_NAME}
        (tmp_path / phase).mkdir()
        check_alert_rules(tmp_path / phase, runs, start, cycle, {RULE: [culprit_alert] if fires else []},
                          {RULE: []})


def test_the_rule_loads_in_prometheus(run):
    health = {r["name"]: r["health"] for g in run["rules"]["data"]["groups"] for r in g["rules"]}
    assert health.get(RULE) == "ok", health


def test_top_pane_shows_who_fills_the_journal(run):
    ws = run["status"]["writers"][run["dev"]]
    top = ws[0]
    assert top["cgroup"] == CULPRIT_NAME and top["unit"] == "blocks" and top["share"] >= 0.8, ws
    assert sum(w["share"] for w in ws) == pytest.approx(1.0)
    # the same values as the metrics
    logged = _samples(run["scrape"], "jstall_journal_logged_blocks_total")
    assert top["logged"] == logged[(run["dev"], CULPRIT_NAME)]
    victim = next(w for w in ws if w["cgroup"] == VICTIM_NAME)
    assert victim["stall_s"] == _samples(run["scrape"], "jstall_cgroup_stall_seconds_total")[(run["dev"], VICTIM_NAME)]
    assert victim["stall_s"] > 0
    pane = run["pane"]
    assert "WHO FILLS THE JOURNAL" in pane, pane
    # DEV CGROUP (its last 39 characters after an ellipsis when longer than 40) LOGGED SHARE% STALL(s)
    rows = {ln[8:48].strip(): ln[48:].split() for ln in pane.splitlines() if ln.startswith(run["dev"] + " ")
            and ln.rstrip().endswith(tuple("0123456789")) and " blk " in ln}
    assert rows["…" + CULPRIT_NAME[-39:]] == [f"{top['logged']:.0f}", "blk", f"{100 * top['share']:.1f}",
                                               f"{top['stall_s']:.2f}"], pane
    assert float(rows[VICTIM_NAME][3]) == pytest.approx(victim["stall_s"], abs=0.006), pane


def test_every_dashboard_metric_is_in_a_real_scrape(run):
    """Each metric the dashboard's panels query is one the monitor served on this ext4 run
    (jstall_xfs_*: on the XFS run of tests/test_monitor_xfs.py)."""
    with open(os.path.join(ROOT, "deploy", "grafana", "jstall-dashboard.json")) as f:
        dash = json.load(f)
    names = {n for p in dash["panels"] for t in p.get("targets", []) for n in re.findall(r"jstall_\w+", t["expr"])}
    served = set(re.findall(r"^(jstall_\w+)[{ ]", run["scrape"], re.M))
    missing = {n for n in names if not n.startswith("jstall_xfs_") and n not in served}
    # the XFS tickets' bytes: only an XFS run serves them
    assert missing == {"jstall_journal_logged_bytes_total"}, missing
    assert {"jstall_journal_logged_blocks_total", "jstall_cgroup_stall_seconds_total"} <= names


def test_nothing_left_behind(run):
    (loops, mounts), cgroups_left = run["left"]
    assert not loops and not mounts and not cgroups_left, run["left"]
