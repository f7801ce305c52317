#!/bin/bash
# guest.sh — boot a distribution's stock kernel in a throwaway QEMU guest and run a command
# in it, with this machine's / (and so the checkout and its .venv) shared read-only and a
# tmpfs for writes: jstall's guest tests run its probes on the kernels production hosts run.
#
#   guest.sh setup [all]               install qemu, busybox and virtme-ng, and fetch the
#                                      kernels of tests/guest-kernels.txt's first column
#                                      (all: their flavours too), image and headers
#   guest.sh run KVER [-t SECS] [-c CPUS] [-w DIR] -- COMMAND
#                                      boot KVER, run COMMAND (bash -c, as root, in the
#                                      checkout); -w DIR: a host directory the guest may write
#                                      (shared at the same path). Exit status: COMMAND's.
#   guest.sh test [KVER ...] [-- PYTEST ARGS]
#                                      the kernel tests (pytest -m 'kernel and not guest') in a
#                                      guest of each listed kernel and flavour (or of those
#                                      given; fetched if need be), one
#                                      after another, their children's timeouts stretched 20x
#                                      (JSTALL_TEST_SLOWDOWN); exit status 1 if any failed
#   guest.sh kernels [generic]         the kernels listed in tests/guest-kernels.txt, each
#                                      release and its flavours (generic: the releases alone)
#
# Kernels are Debian's linux-image-KVER packages, unpacked (not installed) under
# $JSTALL_GUEST_BASE/kernels/KVER with their headers (Debian splits them into the
# -amd64 package, build/, and -common, source/; bcc takes both). The guest runs under TCG:
# /dev/kvm here is an emulating module that cannot run stock kernels. Expect ~20x slower
# than native: correctness, not timing. Every console line goes to $JSTALL_GUEST_BASE/logs.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
BASE=${JSTALL_GUEST_BASE:-/var/cache/jstall-guests}
LIST=$ROOT/tests/guest-kernels.txt
VNG_VERSION=1.42
die() { echo "guest: $*" >&2; exit 125; }

# The listed kernels: each line's release (`kernels generic`: those alone), then each of its
# flavours (cloud, rt), the flavour's name before the architecture's: 6.1.0-56-amd64 cloud
# is 6.1.0-56-cloud-amd64.
kernels() {
    local rel f
    sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$LIST" | while read -r rel flavours; do
        echo "$rel"
        [ "${1:-}" = generic ] && continue
        for f in $flavours; do echo "${rel%-*}-$f-${rel##*-}"; done
    done
}

setup() {
    [ "$(id -u)" -eq 0 ] || die "run as root"
    mkdir -p "$BASE"
    local pkgs="" p
    for p in qemu-system-x86 kmod; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || pkgs="$pkgs $p"
    done
    if [ -n "$pkgs" ]; then
        echo "guest: installing$pkgs"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null || die "cannot install$pkgs"
    fi
    if [ ! -x "$BASE/venv/bin/vng" ]; then
        /usr/bin/python3 -m venv "$BASE/venv" && "$BASE/venv/bin/pip" install -q "virtme-ng==$VNG_VERSION" \
            || die "cannot install virtme-ng $VNG_VERSION"
    fi
    if [ ! -x "$BASE/busybox/bin/busybox" ]; then
        local tmp; tmp=$(mktemp -d "$BASE/dl.XXXX")
        (cd "$tmp" && apt-get download -q busybox-static >/dev/null 2>&1 && dpkg-deb -x busybox-static_*.deb "$BASE/busybox") \
            || { rm -rf "$tmp"; die "cannot fetch busybox-static"; }
        rm -rf "$tmp"
    fi
    local k
    for k in $(kernels "${1:-generic}"); do fetch "$k" || exit $?; done
}

# linux-image-KVER and its headers (-amd64: build/, -common: source/), unpacked under kernels/KVER
fetch() {
    local kv=$1 d=$BASE/kernels/$1 tmp common
    [ -e "$d/.complete" ] && return 0
    echo "guest: fetching kernel $kv"
    rm -rf "$d"
    tmp=$(mktemp -d "$BASE/dl.XXXX")
    common=$(apt-cache depends "linux-headers-$kv" 2>/dev/null | awk '/Depends: linux-headers-.*-common/{print $2; exit}')
    # apt-get download as root writes where _apt cannot: it warns and downloads unsandboxed
    (cd "$tmp" && apt-get download -q "linux-image-$kv" "linux-headers-$kv" ${common:+"$common"} >/dev/null 2>&1) \
        || { rm -rf "$tmp"; echo "guest: apt-get download linux-image-$kv linux-headers-$kv failed" >&2; return 125; }
    mkdir -p "$d"
    for f in "$tmp"/*.deb; do dpkg-deb -x "$f" "$d" || { rm -rf "$tmp"; return 125; }; done
    rm -rf "$tmp"
    local m=$d/lib/modules/$kv
    depmod -b "$d" "$kv" || return 125
    ln -sfn "$d/usr/src/linux-headers-$kv" "$m/build"
    [ -n "$common" ] && ln -sfn "$d/usr/src/$common" "$m/source"
    touch "$d/.complete"
}

run() {
    local kv=$1; shift
    local tmo=1800 cpus=2 mem=4G rw=()
    while [ $# -gt 0 ]; do
        case $1 in
            -t) tmo=$2; shift 2 ;;
            -c) cpus=$2; shift 2 ;;
            -m) mem=$2; shift 2 ;;
            -w) rw+=("--rwdir=$2"); shift 2 ;;
            --) shift; break ;;
            *) die "run: unknown option $1" ;;
        esac
    done
    [ $# -gt 0 ] || die "run: no command"
    local d=$BASE/kernels/$kv
    [ -e "$d/.complete" ] || die "kernel $kv is not fetched (run: sh scripts/guest.sh setup)"
    mkdir -p "$BASE/logs"
    local log script
    log=$BASE/logs/$kv-$(date +%Y%m%d-%H%M%S)-$$.log
    script=$(mktemp "$BASE/logs/cmd.XXXXXX.sh")
    # The guest mounts a tmpfs over /var/tmp and sees /lib/modules from the kernel's tree;
    # this script makes it look like a host jstall runs on: ext4, jbd2 and loop loaded,
    # cgroup v1 controllers at /sys/fs/cgroup/<ctrl> (the lab's blkio throttle) and cgroup2
    # at /sys/fs/cgroup/unified.
    cat > "$script" <<EOF
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
export PYTHONDONTWRITEBYTECODE=1
modprobe -a ext4 jbd2 loop 2>&1
if mountpoint -q /sys/fs/cgroup && [ "\$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
    umount /sys/fs/cgroup && mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup
    for c in cpu cpuacct cpuset memory devices freezer blkio pids; do
        mkdir -p /sys/fs/cgroup/\$c
        mount -t cgroup -o \$c cgroup /sys/fs/cgroup/\$c 2>/dev/null || rmdir /sys/fs/cgroup/\$c
    done
    mkdir -p /sys/fs/cgroup/unified && mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified
fi
cd "$ROOT"
echo "__GUEST_UP \$(cut -d' ' -f1 /proc/uptime)s \$(uname -r)"
bash -c $(printf %q "$*") < /dev/null 2>&1
echo "__GUEST_RC=\$?"
EOF
    chmod 644 "$script"
    # The guest's root: virtio-fs where the kernel has it (Debian's cloud kernels have no
    # 9p: the guest could not mount its root), served by QEMU's own virtiofsd through
    # scripts/guest-virtiofsd.sh (virtme-ng speaks to the Rust one), else 9p.
    # JSTALL_GUEST_FS=9p|virtiofs chooses.
    local fs=${JSTALL_GUEST_FS:-} fsopt=() vbin
    if [ -z "$fs" ]; then
        if grep -qE '^CONFIG_VIRTIO_FS=[ym]' "$d/boot/config-$kv" && [ -x /usr/lib/qemu/virtiofsd ]; then
            fs=virtiofs
        else
            fs=9p
        fi
    fi
    vbin=$(mktemp -d "$BASE/logs/bin.XXXXXX")
    trap 'rm -rf "$vbin"' EXIT
    case $fs in
        virtiofs) mkdir "$vbin/share"   # where each daemon's namespace mounts its directory
                  ln -s "$ROOT/scripts/guest-virtiofsd.sh" "$vbin/virtiofsd"
                  ln -s "$ROOT/scripts/guest-virtiofsd.sh" "$vbin/qemu-system-x86_64" ;;
        9p) fsopt=(--force-9p) ;;
        *) rm -rf "$vbin"; die "JSTALL_GUEST_FS=$fs: 9p or virtiofs" ;;
    esac
    echo "guest: kernel $kv, its root shared by $fs" >&2
    local start=$SECONDS
    export PATH=$vbin:$BASE/venv/bin:$PATH   # vng runs virtme-run; virtiofsd and QEMU: the wrapper
    # thread=single: the vCPUs take turns on one host thread. With one thread per vCPU
    # (QEMU's default), 6.12 oopsed on an int3 in bpf_trace_run1 (a tracepoint's BPF program
    # running while another vCPU patched the code: the monitor turns BPF run-time statistics
    # on, a static key) in one smoke run of three; in turns the patching is never seen half done.
    # -cpu without AVX: QEMU 7.2's TCG (the first to emulate AVX2) computes numpy's AVX2 argsort
    # wrongly (a uint32 array ending at a guard page comes back unsorted; right on a host and on
    # the emulated CPU without AVX), and the recorder's flush died of SIGSEGV in np.unique in 4
    # of 12 guest lab runs; without AVX numpy takes its SSE4 paths.
    # --rodir: the guest's tmpfs over /var/tmp hides the kernel tree otherwise. With no udev here
    # virtme-ng runs the command on the serial console: hence the markers and the filter.
    # In the background, waited for: a SIGTERM, SIGINT or SIGHUP to this script is passed on to
    # timeout, which runs in a process group of its own (a signal to this script's group misses
    # it) and ends the guest's (vng, QEMU, the daemons) with it.
    timeout -k 10 "$tmo" "$BASE/venv/bin/vng" --run "$d/boot/vmlinuz-$kv" --disable-kvm "${fsopt[@]}" \
        --busybox "$BASE/busybox/bin/busybox" --cpus "$cpus" --memory "$mem" \
        --qemu-opts="-accel tcg,thread=single -cpu max,avx=off,avx2=off,fma=off,f16c=off" --rodir="$BASE" "${rw[@]}" \
        --verbose --append "loglevel=1" --exec "bash $script" < /dev/null 2>&1 \
      | tee "$log" \
      | grep --line-buffered -avE '^Probing EDD|^\[ *[0-9]+\.[0-9]+\] |^(Memory|Poking) KASLR|^__GUEST_RC=|^qemu-system-x86_64: terminating|^virtme: waiting for virtiofsd|^fv_remove_watch: TODO|^virtio_loop: Unexpected poll revents' &
    local last=$! me=$BASHPID
    trap 'pkill -TERM -x timeout -P '"$me"'' TERM INT HUP
    while kill -0 "$last" 2>/dev/null; do wait "$last"; done
    trap - TERM INT HUP
    rm -f "$script"
    rm -rf "$vbin"
    local rc
    rc=$(grep -a -m1 -o '__GUEST_RC=[0-9]*' "$log" | cut -d= -f2)
    echo "guest: kernel $kv, $((SECONDS - start)) s, status ${rc:-none (timed out or crashed)}, log $log" >&2
    exit "${rc:-125}"
}

# The kernel tests in a guest of each kernel; the guests' pytest writes no cache or bytecode
# (the checkout is read-only there).
test_kernels() {
    local ks=() args=() k failed=0
    while [ $# -gt 0 ]; do
        case $1 in --) shift; args=("$@"); break ;; *) ks+=("$1"); shift ;; esac
    done
    [ ${#ks[@]} -gt 0 ] || ks=($(kernels))
    [ ${#args[@]} -gt 0 ] || args=(-m "kernel and not guest" tests)
    for k in "${ks[@]}"; do
        fetch "$k" || { failed=1; continue; }
        echo "guest: kernel tests on $k"
        # 8 GiB: the guest's /var/tmp (a tmpfs of half its memory) holds the lab's 2 GiB images
        (run "$k" -t 14400 -m 8G -- "JSTALL_TEST_SLOWDOWN=20 $(printf '%q ' .venv/bin/python -m pytest -p no:cacheprovider -ra "${args[@]}")") || failed=1
    done
    return $failed
}

case ${1:-} in
    setup) shift; setup "$@" ;;
    test) shift; test_kernels "$@" ;;
    run) shift; [ $# -gt 0 ] || die "run: no kernel"; run "$@" ;;
    kernels) shift; kernels "$@" ;;
    *) sed -n '2,/^set -u/p' "$0" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//'; exit 2 ;;
esac
