#!/bin/sh
# Idempotent set-up on Debian (bookworm or later), as root: system packages,
# the project's virtualenv, and a kernel-header tree for bcc's own includes.
set -eu
cd "$(dirname "$0")/.."

[ "$(id -u)" -eq 0 ] || { echo "setup: run as root (sudo make ...)" >&2; exit 1; }

PKGS="bpfcc-tools python3-bpfcc bpftrace bpftool e2fsprogs xfsprogs util-linux kmod python3-venv python3-pip"
# The tests render the HTML report in headless Chromium.
[ "${1:-}" = "test" ] && PKGS="$PKGS chromium"
# The monitor's tests scrape it with a real Prometheus server and drive 'jstall top' in tmux.
[ "${1:-}" = "test" ] && PKGS="$PKGS prometheus tmux"
# benchmarks/record_memory.py records under dbench, an independent metadata-heavy client.
PKGS="$PKGS dbench"
# Clients nobody here wrote: fs_mark (wait chains), rsync beside tar and cp, git (the
# journal-size advice), strace, whose call counts the recorded ones must equal, and fio,
# whose own latencies judge a device's queueing from its counters.
[ "${1:-}" = "test" ] && PKGS="$PKGS fsmark rsync strace git fio"
# benchmarks/advice_accuracy.py checks the advice on real clients: fs_mark, rsync, tar, git.
[ "${1:-}" = "bench" ] && PKGS="$PKGS fsmark rsync git"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
release=$(uname -r)
if [ ! -e "/lib/modules/$release/build" ]; then
    # Prefer the running kernel's own header package; else the distribution's generic one.
    if apt-cache show "linux-headers-$release" >/dev/null 2>&1; then
        dpkg-query -W "linux-headers-$release" >/dev/null 2>&1 || missing="$missing linux-headers-$release"
    else
        generic="linux-headers-$(dpkg --print-architecture)"
        dpkg-query -W -f='${Status}' "$generic" 2>/dev/null | grep -q "install ok installed" || missing="$missing $generic"
    fi
fi
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# bcc's Python bindings are a Debian package for /usr/bin/python3 only.
if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.jstall-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/pip install -q -e '.[test]'
    touch "$stamp"
fi

sh scripts/kernel-headers.sh

# The guest tests boot stock distribution kernels (tests/guest-kernels.txt) in QEMU.
if [ "${1:-}" = "test" ]; then
    bash scripts/guest.sh setup
fi
