#!/bin/sh
# make demo: the classic ext4 journal stall, end to end, in well under a minute.
# Two lab runs of the same xattr workload on a 4 MiB journal and an emulated device that
# serves 2,000 writes a second (every request paced: metadata, journal, data): 128-byte
# inodes (every attribute lives in an external 4 KiB block that the journal must log and
# checkpoint) and 256-byte inodes (attributes fit in the inode). Each phase is timed until
# its work is durable on the device (DURABLE_S; RETURNED_S beside it). Prints both
# diagnoses and writes jstall-demo/report.html for the 128-byte run.
set -eu
cd "$(dirname "$0")/.."
out=jstall-demo
if [ -e "$out" ]; then
    [ -f "$out/.jstall-demo" ] || { echo "demo: $out exists and was not made by the demo; move it away" >&2; exit 1; }
    rm -rf "$out"
fi
mkdir -p "$out"
touch "$out/.jstall-demo"
for inode in 128 256; do
    echo "== lab run: xattr workload, ${inode}-byte inodes, 4 MiB journal, a device of 2,000 write IOPS"
    ./jstall lab run xattr --fs-size 256M --journal-size 4M --inode-size "$inode" \
        --files 3000 --updates 12000 --write-iops 2000 -o "$out/xattr-i$inode"
    echo
done
for inode in 128 256; do
    echo "== jstall analyze $out/xattr-i$inode"
    ./jstall analyze "$out/xattr-i$inode"
    echo
done
./jstall report "$out/xattr-i128" -o "$out/report.html"
echo "demo: sessions in $out/, report in $out/report.html"
echo
echo "== jstall compare $out/xattr-i128 $out/xattr-i256"
./jstall compare "$out/xattr-i128" "$out/xattr-i256" -o "$out/compare.html"
echo "demo: both runs side by side in $out/compare.html"
