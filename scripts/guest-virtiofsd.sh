#!/bin/bash
# guest-virtiofsd.sh — virtme-ng's virtiofsd, played by QEMU's own (the C virtiofsd Debian 12's
# qemu 7.2 ships as /usr/lib/qemu/virtiofsd). scripts/guest.sh puts it first in virtme-ng's
# PATH, as `virtiofsd` and as `qemu-system-x86_64`, for kernels with virtio-fs (Debian's cloud
# kernels have no 9p).
#
# As virtiofsd: virtme-ng starts the Rust virtiofsd's way,
#   virtiofsd --syslog --no-announce-submounts [--posix-acl] [--readonly]
#             --socket-path SOCK --shared-dir DIR --sandbox none --cache MODE &
# and gives it 3 s to write SOCK.pid, or shares DIR by 9p instead. The pid is written first
# thing (a starved host took longer than that to start the daemon), and the C daemon then
# serves DIR in a mount namespace of its own, where DIR is bind-mounted on the directory
# `share` beside this link (its own filesystem alone, no submounts), read-only unless
# virtme-ng asked for a writable share, and sandboxed by chroot into it. --readonly is announced in --help, so virtme-ng asks for it
# for read-only shares.
#
# As qemu-system-x86_64: waits until every vhost-user socket of its -chardev options listens
# (the daemons above start beside virtme-ng), then runs QEMU.
set -u
QEMU_VIRTIOFSD=${JSTALL_QEMU_VIRTIOFSD:-/usr/lib/qemu/virtiofsd}

case ${0##*/} in
    qemu-system-*)
        real=/usr/bin/${0##*/}
        for a in "$@"; do
            case $a in socket,id=charvirtfs*,path=*) ;; *) continue ;; esac
            s=${a##*path=}; s=${s%%,*}
            for _ in $(seq 600); do [ -S "$s" ] && break; sleep 0.1; done
            [ -S "$s" ] || echo "guest-virtiofsd: no virtiofsd listens on $s" >&2
        done
        exec "$real" "$@" ;;
esac

case ${1:-} in
    --version|-V) exec "$QEMU_VIRTIOFSD" --version ;;
    --help|-h)
        "$QEMU_VIRTIOFSD" --help
        echo "    --readonly                 (guest-virtiofsd.sh) share the directory read-only"
        exit 0 ;;
esac
sock="" dir="" cache=auto ro=0
while [ $# -gt 0 ]; do
    case $1 in
        --socket-path) sock=$2; shift 2 ;;
        --socket-path=*) sock=${1#*=}; shift ;;
        --shared-dir) dir=$2; shift 2 ;;
        --shared-dir=*) dir=${1#*=}; shift ;;
        --cache) cache=$2; shift 2 ;;
        --cache=*) cache=${1#*=}; shift ;;
        --sandbox) shift 2 ;;   # always chroot here
        --readonly) ro=1; shift ;;
        --syslog|--no-announce-submounts|--posix-acl) shift ;;
        *) echo "guest-virtiofsd: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$sock" ] && [ -d "$dir" ] || { echo "guest-virtiofsd: --socket-path and --shared-dir needed" >&2; exit 2; }
case $cache in auto|always|none) ;; never) cache=none ;; *) cache=auto ;; esac
# virtme-ng made SOCK a file (mkstemp): the daemon listens there. unshare (without --fork)
# and bash exec in place: this pid is the daemon's, which virtme-ng ends with SIGTERM.
rm -f "$sock"
echo $$ > "$sock.pid"
top=$(dirname "$0")/share
[ -d "$top" ] || { echo "guest-virtiofsd: no directory $top" >&2; exit 1; }
exec unshare --mount --propagation private bash -c '
    mount --bind "$1" "$2" || exit 1
    if [ "$3" = 1 ]; then mount -o remount,bind,ro "$2" || exit 1; fi
    exec "$4" --socket-path="$5" -o source="$2" -o cache="$6" -o sandbox=chroot -o log_level=warn
' guest-virtiofsd "$dir" "$top" "$ro" "$QEMU_VIRTIOFSD" "$sock" "$cache"
