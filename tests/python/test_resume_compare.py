"""resume= continues a run from its checkpoint; compare() is `hsgd compare`."""
import json

import pytest

import hsgd
from conftest import SIM
from netdef import make_net

KW = dict(runtime="sim", workers=4, batch=32, lr=0.05, seed=1, progress=False)


def test_resume_continues_from_the_newest_checkpoint(tmp_path, data, test_data):
    out = tmp_path / "r"
    net = make_net()
    first = hsgd.train(net, data=data, test=test_data, budget=1.0, out=out,
                       set=dict(SIM, **{"train.checkpoint_every": 0.5}), **KW)
    assert first.metrics["time_s"][-1] == 1.0
    # The same model and arrays again (they are not files); a longer budget.
    run = hsgd.train(net, data=data, test=test_data, budget=2.0, resume=out, progress=False)
    assert run.out == str(out)
    assert list(run.metrics["time_s"]) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert run.summary["checkpoints"]["resumed_at_s"] == 1.0


def test_compare_is_hsgd_compare(tmp_path, data, test_data):
    c = hsgd.compare("softmax", data=data, test=test_data, policies=["async", "sync"], rounds=2,
                     runtime="sim", workers=4, batch=32, lr=0.05, budget=1.0, set=SIM,
                     out=tmp_path / "cmp")
    assert [row["policy"] for row in c.table] == ["async", "sync"]
    assert 0 < c.table[1]["final_test_acc"] <= 1 and "diff_test_acc_avg" in c.table[1]
    assert c.json == json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert len(c.runs["sync"]) == 2
    assert c.runs["sync"][1].summary["seed"] == 2  # round r: seed + r
    assert len(c.to_pandas()) == 2


def test_sweep_is_hsgd_sweep(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text("""
policies = ["async", "sync"]
jobs = 2
[set]
data.spec = "synthetic"
model.name = "softmax"
train.budget = 1.0
train.workers = 2
sim.compute_time = 0.01
sim.server_ns_per_param = 1.0
[axes]
optim.lr = [0.01, 0.1]
""")
    tables = hsgd.sweep(grid, out=tmp_path / "sweep")
    assert tables == json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert tables["policies"] == ["async", "sync"] and len(tables["cells"]) == 2
    # rescore: the same tables from the runs as they are, running nothing
    # (a marker from another config identity is kept, not rerun).
    done = tmp_path / "sweep" / "cells" / "optim.lr-0.1" / "sync" / "seed-1" / "sweep-done"
    done.write_text("another identity\n")
    (tmp_path / "sweep" / "sweep.json").unlink()
    assert hsgd.sweep(grid, out=tmp_path / "sweep", rescore=True) == tables
    assert done.read_text() == "another identity\n"
    (done.parent / "metrics.csv").unlink()
    with pytest.raises(ValueError, match="no finished run to rescore"):
        hsgd.sweep(grid, out=tmp_path / "sweep", rescore=True)
