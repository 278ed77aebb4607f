"""Shared fixtures of the Python tests (run by CTest with PYTHONPATH at the
built package and HSGD_CLI at the hsgd executable)."""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def cli():
    path = os.environ.get("HSGD_CLI")
    if not path:
        pytest.skip("HSGD_CLI is not set (run through ctest)")
    return path


def blobs(n, features=20, classes=5, seed=0):
    """A Gaussian mixture (the same centres for every seed): float32 features,
    int64 labels."""
    centres = np.random.default_rng(1234).normal(0, 1.5, size=(classes, features))
    centres = centres.astype(np.float32)
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    x = centres[y] + rng.normal(0, 1, size=(n, features)).astype(np.float32)
    return np.ascontiguousarray(x, dtype=np.float32), y.astype(np.int64)


@pytest.fixture(scope="session")
def data():
    return blobs(1200, seed=1)


@pytest.fixture(scope="session")
def test_data():
    return blobs(300, seed=2)


# Deterministic simulator settings (no calibration: fixed costs).
SIM = {"sim.compute_time": 0.01, "sim.server_ns_per_param": 1.0, "train.eval_every": 0.5}


def run_py(code, timeout=120, **kw):
    """Runs `code` in a fresh /usr/bin/python3 with this environment."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, **kw)
