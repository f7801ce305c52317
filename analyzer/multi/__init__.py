"""More than one session: a lab sweep's runs (sweep), two sessions side by side (compare), a
collection from many hosts on Dask (fleet)."""
