"""Callbacks run at evaluations on the calling thread; False stops the run,
an exception stops it and propagates; Ctrl-C stops it within a second."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import hsgd
from conftest import HERE, SIM

ZOO = dict(runtime="sim", workers=4, batch=32, lr=0.05, seed=1, progress=False)


@pytest.mark.parametrize("runtime", ["sim", "threads", "hogwild"])
def test_callback_false_stops_at_that_evaluation(tmp_path, data, test_data, runtime):
    rows = []

    def callback(row):
        assert threading.current_thread() is threading.main_thread()
        rows.append(row)
        return len(rows) < 3  # False at the third evaluation

    kw = dict(ZOO, runtime="threads", policy="hogwild") if runtime == "hogwild" else \
        dict(ZOO, runtime=runtime)
    run = hsgd.train("softmax", data=data, test=test_data, budget=100.0, callback=callback,
                     out=tmp_path / "r", set=SIM, **kw)
    assert len(rows) == 3
    assert len(run.metrics["time_s"]) == 3  # that row is the last
    assert list(run.metrics["time_s"]) == [r["time_s"] for r in rows]
    assert rows[2]["policy"] == run.summary["policy"]
    assert run.summary["stopped"].startswith(
        "stopped by request: the callback returned False at the evaluation at")
    assert run.summary["train_s"] < 100
    if runtime == "sim":
        assert rows[2]["time_s"] == 1.0


def test_callback_exception_stops_the_run_and_propagates(tmp_path, data, test_data):
    class Boom(Exception):
        pass

    seen = []

    def callback(row):
        seen.append(row["time_s"])
        if row["time_s"] >= 1.0:
            raise Boom("from the callback")

    t0 = time.monotonic()
    with pytest.raises(Boom, match="from the callback"):
        hsgd.train("softmax", data=data, test=test_data, budget=500.0, callback=callback,
                   out=tmp_path / "r", set=SIM, **ZOO)
    assert seen == [0.0, 0.5, 1.0]  # not called again after it raised
    assert time.monotonic() - t0 < 30
    # The run stopped at that evaluation and wrote its outputs.
    metrics = (tmp_path / "r" / "metrics.csv").read_text().splitlines()
    assert len(metrics) == 1 + 3


CHILD = r"""
import sys, time, os
sys.path.insert(0, {here!r})
import hsgd
from conftest import blobs, SIM
data, test = blobs(1200, seed=1), blobs(300, seed=2)
said = []
def callback(row):
    if row["time_s"] >= 1.0 and not said:
        said.append(1)
        print("started", flush=True)
try:
    hsgd.train("softmax", data=data, test=test, runtime="sim", workers=4, batch=32, lr=0.05,
               budget=1e6, out={out!r}, callback=callback, progress=False,
               set=dict(SIM, **{{"train.checkpoint_every": 1000.0}}))
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
"""


def test_sigint_stops_a_long_run_within_a_second(tmp_path):
    out = str(tmp_path / "r")
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(here=HERE, out=out)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "started"
        time.sleep(0.3)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().split()
        child.wait(timeout=30)
    finally:
        child.kill()
    assert line[0] == "interrupted", line
    assert float(line[1]) - sent < 1.0
    # Stopped like a finished run: outputs, and a final checkpoint.
    assert os.path.exists(os.path.join(out, "metrics.csv"))
    assert "stopped by request: KeyboardInterrupt" in open(os.path.join(out, "summary.json")).read()
    assert os.listdir(os.path.join(out, "checkpoints"))


PILOT_CHILD = r"""
import sys, tempfile
sys.path.insert(0, {here!r})
tempfile.tempdir = {tmp!r}
import hsgd
from conftest import blobs, SIM
data, test = blobs(1200, seed=1), blobs(300, seed=2)
print("training", flush=True)
try:
    hsgd.train("softmax", data=data, test=test, runtime="sim", workers=4, batch=32, lr=0.05,
               policy="auto", budget=1e6, progress=False,
               set=dict(SIM, **{{"policy.auto_pilot": 0.5}}))
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_sigint_during_autos_pilot_stops_with_nothing_written(tmp_path):
    """Ctrl-C while auto's pilot runs (policy.auto_pilot, docs/auto.md): a
    KeyboardInterrupt, and no run directory left, not even the empty
    temporary one hsgd.train made for out=None."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    child = subprocess.Popen([sys.executable, "-c", PILOT_CHILD.format(here=HERE, tmp=str(tmp))],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "training"
        time.sleep(2.0)  # inside the pilot: its first candidate alone runs 5e5 virtual s
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().strip()
        child.wait(timeout=30)
    finally:
        child.kill()
    assert line == "interrupted", line
    assert os.listdir(tmp) == []
