# Both targets do their own set-up, idempotently, on Debian as root.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup setup-test setup-bench demo test test-kernels bench bench-long clean

setup:
	sh scripts/setup.sh

setup-test:
	sh scripts/setup.sh test

setup-bench:
	sh scripts/setup.sh bench

demo: setup
	sh scripts/demo.sh

test: setup-test
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -ra --durations=15 tests

# The smoke run, then the kernel tests, on each stock kernel of tests/guest-kernels.txt and
# its flavours (cloud, rt), in QEMU guests (emulated: hours, not minutes; make test runs the
# smoke run on each generic kernel).
test-kernels: setup-test
	bash scripts/guest.sh setup all
	st=0; for k in $$(bash scripts/guest.sh kernels); do \
	    JSTALL_GUEST_KERNELS=$$k $(PY) -m pytest -ra -m guest tests/test_guest_kernels.py || st=1; \
	done; bash scripts/guest.sh test || st=1; exit $$st

bench: setup-bench
	$(PY) benchmarks/record_overhead.py
	$(PY) benchmarks/probe_startstop.py
	$(PY) benchmarks/analyze_speed.py
	$(PY) benchmarks/advice_accuracy.py --resume /var/tmp/jstall-advice-accuracy
	$(PY) benchmarks/tune_check.py
	$(PY) benchmarks/monitor_overhead.py
	$(PY) benchmarks/report_speed.py
	$(PY) benchmarks/fleet_speed.py

# Long runs: 10 minutes of recording under dbench, a 30-minute monitor soak.
bench-long: setup
	$(PY) benchmarks/record_memory.py
	$(PY) benchmarks/monitor_soak.py

clean:
	rm -rf $(VENV) build *.egg-info
