"""import hsgd without torch; introspection; zero-copy arrays."""
import numpy as np

import hsgd
from hsgd import _data
from conftest import HERE, run_py


def test_import_and_train_without_torch(tmp_path):
    code = f"""
import sys
sys.modules["torch"] = None  # import torch now raises ImportError
sys.path.insert(0, {HERE!r})
import hsgd
from conftest import blobs, SIM
run = hsgd.train("softmax", data=blobs(400), runtime="sim", workers=2, budget=1.0,
                 out={str(tmp_path / "r")!r}, set=SIM, progress=False)
assert sys.modules["torch"] is None
print("ok", len(run.metrics["test_acc"]), run.summary["model"])
"""
    p = run_py(code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "ok" and p.stdout.split()[2] == "softmax"


def test_introspection():
    assert hsgd.__version__
    assert {"sync", "async", "hybrid", "auto", "kasync:K", "ssp:S", "local:H",
            "hogwild"} <= set(hsgd.policies())
    keys = hsgd.config_keys()
    assert keys["train.workers"]["default"] == "4"
    assert "stragglers.sigma" in keys and keys["optim.kind"]["type"]


def test_float32_arrays_are_borrowed_others_converted_once(data):
    x, y = data
    assert _data.make((x, y), "data").borrowed
    assert _data.make((x.astype(np.float64), y), "data").borrowed  # converted in Python, once
    assert _data._features(x, "data X") is x  # no copy
    assert _data.make((x, y), "data").size == len(y)
