#!/bin/sh
# bcc compiles its BPF programs with kernel headers for its own includes. When the
# running kernel ships none (/lib/modules/$(uname -r)/build is missing), build a
# merged tree of the distribution's generic headers under .venv/share/jstall/:
# Debian splits them into linux-headers-X-common (include/) and linux-headers-X-ARCH
# (generated files, .config), and bcc's BCC_KERNEL_SOURCE takes a single directory.
# jstall points BCC_KERNEL_SOURCE there only when the kernel's own build dir is absent.
# Struct offsets never come from these headers: jstall reads them from BTF.
set -eu
cd "$(dirname "$0")/.."
release=$(uname -r)
dest=.venv/share/jstall/kernel-headers
# The kernel's own headers: build/ alone, or Debian's split build/ (generated) + source/ (-common).
if [ -e "/lib/modules/$release/build/include/linux/kconfig.h" ] || [ -e "/lib/modules/$release/source/include/linux/kconfig.h" ]; then
    rm -rf "$dest"
    exit 0
fi
arch_dir=$(ls -d /usr/src/linux-headers-*-amd64 /usr/src/linux-headers-*-arm64 2>/dev/null | grep -v -- '-common' | sort -V | tail -n 1 || true)
if [ -z "$arch_dir" ]; then
    echo "kernel-headers: no /usr/src/linux-headers-*; install linux-headers-$(dpkg --print-architecture)" >&2
    exit 1
fi
common_dir=$(sed -n 's/^include \(.*\)\/Makefile$/\1/p' "$arch_dir/Makefile" | head -n 1)
[ -n "$common_dir" ] && [ -d "$common_dir" ] || common_dir="${arch_dir%-*}-common"
if [ -f "$dest/.source" ] && [ "$(cat "$dest/.source")" = "$arch_dir" ]; then
    exit 0
fi
rm -rf "$dest"
mkdir -p "$dest"
cp -as "$common_dir/." "$dest/"
cp -as --remove-destination "$arch_dir/." "$dest/"
echo "$arch_dir" > "$dest/.source"
echo "kernel-headers: using generic headers from $arch_dir (no headers for $release)"
