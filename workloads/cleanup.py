"""Crash cleanup: what a run directory still holds on the system (throttle rules, mounts,
loop devices, files), undoing it, and finding the runs that crashed processes left behind."""

import errno
import os

from jstall.errors import JstallError
from jstall.system import mounts as mount_table
from jstall.system import proc_start

from . import tenantcg, throttle
from .loopdev import detach, dev_of, loop_backing_files, umount
from .rundir import DEFAULT_SCRATCH, SCRATCH_MARKER, read_marker


def run_state(run_dir, marker=None):
    """What a run directory still holds on the system: {'throttles': {dev: [names]},
    'mounts': [mountpoint], 'loops': [/dev/loopN], 'files': [path]}. Loops are found by
    their backing file (inside run_dir), mounts by mount point or source; throttle rules only
    for devices that are unbound or still bound to the run's images."""
    marker = marker or read_marker(run_dir) or {}
    prefix = run_dir.rstrip("/") + "/"
    backing = loop_backing_files()
    loops = [lp for lp, path in backing.items() if path.startswith(prefix)]
    # loop devices stacked on those (a stacked device's upper loop), detached first
    upper = [lp for lp, path in backing.items() if path in loops]
    loops = upper + loops
    mounts = [e["mountpoint"] for e in mount_table() if e["mountpoint"].startswith(prefix) or e["source"] in loops]
    ours = {dev_of(lp) for lp in loops}
    throttles = {}
    for dev in list(marker.get("throttles", {})) + sorted(ours):
        bound = [lp for lp in backing if os.path.exists(lp) and dev_of(lp) == dev]
        if bound and not (set(bound) & set(loops)):
            continue  # the device now belongs to someone else's loop: leave its rules alone
        names = [n for n in throttle.LIMIT_FILES if throttle.read_rules(n).get(dev)]
        if names:
            throttles[dev] = names
    files = []
    if os.path.isdir(run_dir):
        for root, dirs, fnames in os.walk(run_dir):
            if root == run_dir.rstrip("/") and mounts and "mnt" in dirs:
                dirs.remove("mnt")  # a mounted filesystem's files go with its image
            files += [os.path.join(root, n) for n in fnames]
    return {"throttles": throttles, "mounts": mounts[::-1], "loops": loops, "files": sorted(files),
            "cgroups": tenantcg.leftovers(run_dir)}


def undo_run(run_dir, marker=None):
    """Remove throttles, unmount, detach loops, delete images and the run directory; return
    the actions taken as text lines."""
    st = run_state(run_dir, marker)
    done = []
    # the tenants pattern's cgroups, and the processes a killed run left in them (they may
    # hold the mount)
    done += [f"removed cgroup {d}" for d in tenantcg.remove(run_dir, kill=True)]
    for dev, names in st["throttles"].items():
        throttle.remove(dev, names)
        done.append(f"removed throttle {dev} ({', '.join(names)})")
    for m in st["mounts"]:
        umount(m)
        done.append(f"unmounted {m}")
    for lp in st["loops"]:
        detach(lp)
        done.append(f"detached {lp}")
    for path in st["files"]:
        try:
            os.unlink(path)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
    if st["files"]:
        done.append(f"deleted {len(st['files'])} files in {run_dir}")
    for root, dirs, _ in os.walk(run_dir, topdown=False):
        for d in dirs:
            try:
                os.rmdir(os.path.join(root, d))
            except OSError:
                pass
    try:
        os.rmdir(run_dir)
        done.append(f"removed {run_dir}")
    except OSError:
        pass
    return done


def scratch_runs(scratch_dir=None):
    """Run directories under a scratch directory, each {'run_dir', 'marker', 'alive', 'state'};
    'alive' when the process that made it still runs."""
    base = os.path.abspath(scratch_dir or DEFAULT_SCRATCH)
    if not os.path.isdir(base):
        return []
    out = []
    for name in sorted(os.listdir(base)):
        run_dir = os.path.join(base, name)
        marker = read_marker(run_dir)
        if not os.path.isdir(run_dir) or marker is None:
            continue
        alive = marker.get("pid_start") is not None and proc_start(marker.get("pid")) == marker.get("pid_start")
        out.append({"run_dir": run_dir, "marker": marker, "alive": alive, "state": run_state(run_dir, marker)})
    return out


def cleanup(scratch_dir=None, dry_run=False, include_alive=False):
    """Undo the runs crashed processes left under a scratch directory (runs whose process
    still runs only with include_alive). Returns [(run_dir, [action lines])]; with dry_run
    the lines say what would be done and nothing changes."""
    base = os.path.abspath(scratch_dir or DEFAULT_SCRATCH)
    if os.path.exists(base) and os.listdir(base) and not os.path.exists(os.path.join(base, SCRATCH_MARKER)):
        raise JstallError(f"--scratch {base}: not a lab scratch directory (no {SCRATCH_MARKER}); "
                          "nothing to clean there")
    out = []
    for run in scratch_runs(base):
        if run["alive"] and not include_alive:
            continue
        if dry_run:
            st = run["state"]
            lines = [f"would remove throttle {d} ({', '.join(n)})" for d, n in st["throttles"].items()]
            lines += [f"would unmount {m}" for m in st["mounts"]]
            lines += [f"would detach {lp}" for lp in st["loops"]]
            lines += [f"would end the processes in and remove cgroup {d}" for d in st["cgroups"]]
            lines += [f"would delete {p}" for p in st["files"]]
            lines.append(f"would remove {run['run_dir']}")
            out.append((run["run_dir"], lines))
        else:
            out.append((run["run_dir"], undo_run(run["run_dir"], run["marker"])))
    return out
