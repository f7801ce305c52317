"""A recorded session read back: its tables as DataFrames (load), its time windows (window)
and what the recording was (recording)."""
