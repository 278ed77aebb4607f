"""hsgd.train and `hsgd train` are one train path: the same config and seed
give the same bytes; the trained model predicts as `hsgd eval` says."""
import json
import os
import subprocess

import numpy as np
import torch

import hsgd
from conftest import SIM, cli
from netdef import make_net

SETTINGS = dict(policy="hybrid", runtime="sim", workers=4, batch=32, lr=0.05, budget=3.0, seed=3)


def cli_args(s):
    return ["--policy", s["policy"], "--runtime", s["runtime"], "--workers", str(s["workers"]),
            "--batch", str(s["batch"]), "--lr", str(s["lr"]), "--budget", str(s["budget"]),
            "--seed", str(s["seed"])] + [a for k, v in SIM.items() for a in ("--set", f"{k}={v}")]


def test_sim_run_is_byte_identical_to_the_cli(tmp_path, data, test_data):
    net = make_net()
    py_out = tmp_path / "py"
    # With the gradient noise scale on: its four columns are the CLI's too.
    run = hsgd.train(net, data=data, test=test_data, out=py_out,
                     set={**SIM, "train.noise_scale": True}, progress=False, **SETTINGS)
    # The CLI on the TorchScript file the module scripts to, and the arrays as .npy files.
    torch.jit.script(net).save(str(tmp_path / "Net.pt"))
    for name, a in [("X", data[0]), ("y", data[1]), ("Xt", test_data[0]), ("yt", test_data[1])]:
        np.save(tmp_path / f"{name}.npy", a)
    subprocess.run([cli(), "train", "--model", "torchscript:Net.pt", "--data", "npy:X.npy,y.npy",
                    "--test-data", "npy:Xt.npy,yt.npy", "--out", "cli", "--quiet",
                    "--set", "train.noise_scale=true"] +
                   cli_args(SETTINGS), cwd=tmp_path, check=True)
    for f in ["metrics.csv", "model.bin"]:
        assert (py_out / f).read_bytes() == (tmp_path / "cli" / f).read_bytes(), f
    assert len(run.metrics["time_s"]) >= 3
    assert list(run.metrics)[-4:] == ["noise_scale", "grad_norm_sq", "grad_trace_cov", "noise_lag"]
    assert np.isfinite(run.metrics["grad_trace_cov"][1:]).all()
    with open(py_out / "metrics.csv") as f:
        assert list(run.metrics) == f.readline().strip().split(",")
    assert run.summary == json.loads((py_out / "summary.json").read_text())
    assert run.summary["runtime"] == "sim" and run.role == ""


def test_predictions_agree_with_hsgd_eval_and_state_dict(tmp_path, data, test_data):
    net = make_net()
    run = hsgd.train(net, data=data, test=test_data, out=tmp_path / "run", set=SIM,
                     progress=False, **SETTINGS)
    x, y = test_data
    with torch.no_grad():
        pred = run.model(torch.from_numpy(x)).argmax(1).numpy()
    for name, a in [("Xt", x), ("yt", y)]:
        np.save(tmp_path / f"{name}.npy", a)
    ev = json.loads(subprocess.run(
        [cli(), "eval", "--model", str(tmp_path / "run" / "model.bin"), "--data",
         f"npy:{tmp_path}/Xt.npy,{tmp_path}/yt.npy", "--json"],
        check=True, capture_output=True, text=True).stdout)
    assert ev["samples"] == len(y)
    assert abs(ev["test_acc"] - float(np.mean(pred == y))) < 1e-9
    assert ev["test_acc"] > 0.5  # it learned
    # hsgd.eval is `hsgd eval --json` (on the arrays, and on the files).
    assert hsgd.eval(run, data=(x, y))["test_acc"] == ev["test_acc"]
    assert hsgd.eval(run.out, data=f"npy:{tmp_path}/Xt.npy,{tmp_path}/yt.npy") == ev
    # The state dict loads into a fresh instance of the user's module.
    fresh = make_net(seed=99)
    fresh.load_state_dict(run.state_dict())
    fresh.eval()
    std = (x - run.model.input_mean) / run.model.input_std
    with torch.no_grad():
        assert np.array_equal(fresh(torch.from_numpy(std.astype(np.float32))).argmax(1).numpy(),
                              pred)


class Unscriptable(torch.nn.Module):
    """torch.jit.script refuses *args; tracing takes it."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(20, 5)

    def forward(self, x, *rest):
        return self.fc(x)


def test_a_module_that_does_not_script_is_traced_with_one_warning(tmp_path, data, test_data):
    import warnings
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = hsgd.train(Unscriptable(), data=data, test=test_data, out=tmp_path / "t",
                         set=SIM, progress=False, **SETTINGS)
    mine = [w for w in caught if "hsgd:" in str(w.message)]
    assert len(mine) == 1 and "traced" in str(mine[0].message)
    assert "freezes" in str(mine[0].message)
    assert run.summary["model"] == "torchscript:Unscriptable.pt"
    assert run.metrics["test_acc"][-1] > 0.5


def test_auto_with_a_pilot_is_the_clis(tmp_path, data, test_data):
    """auto's pilot (policy.auto_pilot, docs/auto.md) from Python, on in-memory
    arrays and a TorchScript module: the same candidates' figures, the same
    choice and the same run as the CLI's on the files."""
    net = make_net()
    s = dict(SETTINGS, policy="auto")
    pilot = {**SIM, "policy.auto_pilot": 0.25, "policy.auto_pilot_margin": 0}
    run = hsgd.train(net, data=data, test=test_data, out=tmp_path / "py", set=pilot,
                     progress=False, **s)
    torch.jit.script(net).save(str(tmp_path / "Net.pt"))
    for name, a in [("X", data[0]), ("y", data[1]), ("Xt", test_data[0]), ("yt", test_data[1])]:
        np.save(tmp_path / f"{name}.npy", a)
    subprocess.run([cli(), "train", "--model", "torchscript:Net.pt", "--data", "npy:X.npy,y.npy",
                    "--test-data", "npy:Xt.npy,yt.npy", "--out", "cli", "--quiet",
                    "--set", "policy.auto_pilot=0.25", "--set", "policy.auto_pilot_margin=0"]
                   + cli_args(s), cwd=tmp_path, check=True)
    cli_summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    py_pilot, cli_pilot = run.summary["auto_pilot"], cli_summary["auto_pilot"]
    assert py_pilot["candidates"] == cli_pilot["candidates"]
    # the default set (k+hybrid) on 4 workers with plain SGD
    assert [c["policy"] for c in py_pilot["candidates"]] == ["sync", "async", "kasync:2", "hybrid"]
    # margin 0: the best figure of the round that decides (the second, the default)
    decides = py_pilot.get("second") or py_pilot["candidates"]
    best = max(decides, key=lambda c: c["ranked"])
    assert py_pilot["chosen"] == best["policy"]
    assert (tmp_path / "py" / "metrics.csv").read_bytes() == \
        (tmp_path / "cli" / "metrics.csv").read_bytes()
    assert f"auto_choice = '{best['policy']}'" in (tmp_path / "py" / "config.toml").read_text()
