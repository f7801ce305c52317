"""jstall.jbd2: jbd2's log-space rules, one definition read by the monitor, the analyzer and
the lab, free of pandas (the monitor imports it)."""

import subprocess
import sys

import numpy as np
import pytest

from jstall import jbd2


def test_pandas_free():
    code = "import sys, jstall.jbd2; print([m for m in ('pandas', 'numpy', 'pyarrow') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_kernels_rules():
    # jbd2_log_space_left(): j_free - 32 - committing credits; checkpoint below max transaction
    assert jbd2.space_left(500, 40) == 428
    assert jbd2.headroom(428, 341, 1024) == (87, pytest.approx(8.496, abs=1e-3))
    assert jbd2.headroom_ratio(428, 341, 1024) == pytest.approx(87 / (1024 - 32 - 341))
    assert jbd2.headroom_ratio(300, 341, 1024) == 0.0 and jbd2.headroom_ratio(2000, 341, 1024) == 1.0
    # element-wise on arrays (the monitor's batches), 0 where the log cannot hold a transaction
    r = jbd2.headroom_ratio(np.array([428, 300, 2000, 10]), 341, np.array([1024, 1024, 1024, 300]))
    assert r.tolist() == [pytest.approx(87 / 651), 0.0, 1.0, 0.0] and jbd2.headroom_ratio(10, 341, 300) == 0.0
    assert jbd2.forced_fill_pct(341, 1024) == pytest.approx(100 * (1 - 373 / 1024))
    # j_max_transaction_buffers = journal / 4 before 6.11, / 3 since
    assert jbd2.divisor("6.1.0-56-amd64") == 4.0 and jbd2.divisor("6.12.117+deb12-amd64") == 3.0
    assert jbd2.divisor("6.18.44-fc") == 3.0 and jbd2.divisor(None) == 3.0
    assert jbd2.transaction_divisor(1024, 256) == 4.0 and jbd2.transaction_divisor(1024, None, 0, "6.1.0") == 4.0
    assert jbd2.transaction_divisor(1280, 341, 256) == 3.0   # fast-commit blocks come off first
    assert jbd2.blocks_needed(1000, 1.0, 3) == 3 * 1032
    # arrays too
    assert np.array_equal(jbd2.space_left(np.array([100, 200]), np.array([0, 10])), [68, 158])
