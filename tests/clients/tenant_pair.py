"""Two tenants on one filesystem: one rewrites an extended attribute on each of FILES files
(a distinct value each, so every file keeps its own attribute block on 128-byte inodes),
ROUNDS times over; the other writes 4 KiB and calls fdatasync every PERIOD_MS until the
first is done. Usage: tenant_pair.py FILES ROUNDS PERIOD_MS (in the directory to use)."""

import os
import sys
import time

files, rounds, period = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1e3
os.makedirs("tenant", exist_ok=True)
names = [f"tenant/f{i}" for i in range(files)]
for n in names:
    open(n, "w").close()
pid = os.fork()
if pid == 0:
    for r in range(rounds):
        for n in names:
            os.setxattr(n, "user.a", f"{n}-{r}".encode() * 4)
    os._exit(0)
fd = os.open("client.dat", os.O_CREAT | os.O_WRONLY, 0o644)
i = 0
while os.waitpid(pid, os.WNOHANG) == (0, 0):
    os.pwrite(fd, b"x" * 4096, (i % 256) * 4096)
    os.fdatasync(fd)
    i += 1
    time.sleep(period)
os.close(fd)
