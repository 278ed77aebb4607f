"""Every refusal raises the documented exception with the CLI's one-line
message and leaves no half-written output directory."""
import os

import numpy as np
import pytest

import hsgd
from conftest import SIM

BASE = dict(runtime="sim", workers=2, batch=16, lr=0.05, budget=2.0, progress=False)


def refused(tmp_path, exc, match, model="softmax", **kw):
    out = tmp_path / "out"
    with pytest.raises(exc, match=match) as e:
        hsgd.train(model, out=out, **dict(BASE, **kw))
    assert "\n" not in str(e.value)
    assert not out.exists()  # nothing written, not even the directory
    return e.value


def test_bad_shapes(tmp_path, data):
    x, y = data
    refused(tmp_path, ValueError, r"^data X: features have shape \(1200,\); expected N x D",
            data=(x[:, 0].copy(), y), set=SIM)
    refused(tmp_path, ValueError, r"^data y: 1199 labels for the 1200 samples of data X",
            data=(x, y[:-1]), set=SIM)


def test_nan_features(tmp_path, data):
    x, y = data
    x = x.copy()
    x[7, 3] = np.nan
    refused(tmp_path, ValueError,
            r"^data X: feature 3 of sample 7 is nan, expected a finite number",
            data=(x, y), set=SIM)


def test_labels_float_or_out_of_range(tmp_path, data, test_data):
    x, y = data
    refused(tmp_path, ValueError, r"^data y: labels of dtype float64: expected an integer dtype",
            data=(x, y.astype(np.float64)), set=SIM)
    bad = y.copy()
    bad[5] = -1
    refused(tmp_path, ValueError, r"^data y: label -1 at index 5: expected an integer in",
            data=(x, bad), set=SIM)
    tx, ty = test_data
    ty = ty.copy()
    ty[0] = 9
    refused(tmp_path, ValueError, r"^test=\(X, y\): sample 0: expected a label in 0..4 .*got 9$",
            data=(x, y), test=(tx, ty), set=SIM)


def test_config_errors(tmp_path, data):
    refused(tmp_path, ValueError, r"^--set: unknown key 'train.nope'", data=data, set={"train.nope": 1})
    refused(tmp_path, ValueError, r"^policy.name = 'nope': expected sync, async",
            data=data, policy="nope", set=SIM)
    refused(tmp_path, ValueError, r"^--data 'nope'", data="nope", set=SIM)
    refused(tmp_path, ValueError, r"model", model="nope", data=data, set=SIM)


def test_diverged_carries_the_partial_run(tmp_path, data):
    with pytest.raises(hsgd.Diverged, match="training diverged") as e:
        hsgd.train("softmax", data=data, out=tmp_path / "d", set=dict(SIM), lr=1e9,
                   **{k: v for k, v in BASE.items() if k != "lr"})
    run = e.value.run
    assert run.summary["stopped"].startswith("training diverged")
    assert len(run.metrics["time_s"]) >= 1


def test_too_few_workers(tmp_path, data):
    with pytest.raises(hsgd.TooFewWorkers, match="fewer than train.min_workers") as e:
        hsgd.train("softmax", data=data, out=tmp_path / "f", set=dict(
            SIM, **{"faults.kill": ["worker:0@0.7s"], "train.min_workers": 2}), **BASE)
    assert "min_workers" in e.value.run.summary["stopped"]


def test_temporary_out_is_removed_on_refusal(data, monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(ValueError):
        hsgd.train("softmax", data=data, policy="nope", **{k: v for k, v in BASE.items()})
    assert os.listdir(tmp_path) == []
