"""XFS's log: each log-space wait with its space left and what the tail waited for, one row per
log beside the kernel's counters (logs)."""
