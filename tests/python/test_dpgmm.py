"""model dpgmm from Python (issue 31): a short SVI run on synthetic-gmm
writes the mixture figures, and a refused setting raises ValueError with the
CLI's one-line message naming the key."""
import math

import pytest

import hsgd

SVI = {"data.synthetic_samples": 3000, "data.synthetic_features": 3,
       "data.synthetic_classes": 4, "data.synthetic_separation": 3.0,
       "model.truncation": 10, "optim.lr_schedule": "robbins-monro", "optim.tau": 2,
       "sim.compute_time": 0.01, "sim.server_ns_per_param": 10, "train.eval_every": 0.5}


def test_dpgmm_trains_from_python(tmp_path):
    run = hsgd.train("dpgmm", data="synthetic-gmm", runtime="sim", workers=4, batch=10, lr=1.0,
                     policy="async", epochs=6, out=tmp_path / "out", set=SVI, progress=False)
    s = run.summary
    assert s["model"] == "dpgmm"
    assert s["test_acc"] is None or math.isnan(s["test_acc"])
    assert s["test_loglik"] == pytest.approx(-s["test_loss"])
    assert 4 <= s["effective_k"] <= 10  # the four true ones among those found
    assert s["ari"] > 0.8
    assert "effective_k" in (tmp_path / "out" / "metrics.csv").read_text().splitlines()[0]


def test_dpgmm_refuses_momentum(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"^optim.kind = 'momentum': model dpgmm") as e:
        hsgd.train("dpgmm", data="synthetic-gmm", runtime="sim", workers=2, lr=1.0, epochs=1,
                   out=out, set=dict(SVI, **{"optim.kind": "momentum"}), progress=False)
    assert "\n" not in str(e.value)
    assert not out.exists()
