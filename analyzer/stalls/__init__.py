"""Stalled calls and what they waited on, for any journal kind: the cause registry and stack
classifier (causes), wait chains (chains), the stall table (find), per-call and per-process
statistics (calls, processes) and the devices' load (devices)."""
