"""A small loop-device ext4 for the recorder's kernel tests, removed on exit
(also when the test fails): unmount, throttle off, loop detached, image deleted."""

import contextlib
import os
import subprocess
import tempfile

THROTTLE = "/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device"


def sh(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@contextlib.contextmanager
def loop_ext4(size_mb=64, mkfs_args=("-I", "128", "-J", "size=4"), write_iops=None):
    """Yield (mountpoint, '/dev/loopN', 'MAJ:MIN')."""
    tmp = tempfile.mkdtemp(prefix="jstall-test-", dir="/var/tmp")
    image, mnt = os.path.join(tmp, "fs.img"), os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    loop = dev = None
    mounted = throttled = False
    try:
        with open(image, "wb") as f:
            f.truncate(size_mb << 20)
        sh("mkfs.ext4", "-q", "-F", *mkfs_args, image)
        loop = sh("losetup", "--find", "--show", image)
        st = os.stat(loop)
        dev = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        sh("mount", loop, mnt)
        mounted = True
        if write_iops:
            with open(THROTTLE, "w") as f:
                f.write(f"{dev} {write_iops}")
            throttled = True
        yield mnt, loop, dev
    finally:
        if throttled:
            with open(THROTTLE, "w") as f:
                f.write(f"{dev} 0")
        if mounted:
            subprocess.run(["umount", mnt], check=False)
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False)
        if os.path.exists(image):
            os.unlink(image)
        os.rmdir(mnt)
        os.rmdir(tmp)
