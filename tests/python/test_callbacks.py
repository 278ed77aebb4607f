"""Callbacks run at evaluations on the calling thread; False stops the run,
an exception stops it and propagates; Ctrl-C stops it within a second."""
import json
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
try:
    hsgd.train("softmax", data=data, test=test, runtime="sim", workers=4, batch=32, lr=0.05,
               budget=1e6, out={out!r}, progress=False,
               set=dict(SIM, **{{"train.checkpoint_every": 5.0}}))
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
"""


def wait_for_files(path, timeout):
    """Until the directory `path` holds a file; False after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.isdir(path) and os.listdir(path):
            return True
        time.sleep(0.05)
    return False


def test_sigint_stops_a_long_run_and_writes_its_outputs(tmp_path):
    """SIGINT to a child whose run would go on for hours (a budget of 1e6 s):
    KeyboardInterrupt, and the outputs of a finished run. How soon is
    `make bench-python`'s figure (bench/python/figures.py, "ctrl-c"); the
    bound here only tells a stop from none."""
    out = str(tmp_path / "r")
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(here=HERE, out=out)],
                             stdout=subprocess.PIPE, text=True)
    try:
        # A checkpoint (every 5 s of the run's time) says training is under way.
        assert wait_for_files(os.path.join(out, "checkpoints"), timeout=60)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        # Its output up to its exit, 20 s at most: a run that ignored the
        # signal would go on for hours (TimeoutExpired fails the test).
        rest, _ = child.communicate(timeout=20)
    finally:
        child.kill()
    line = rest.split()
    assert line[:1] == ["interrupted"], rest
    assert float(line[1]) > sent
    # Stopped like a finished run: its outputs, and a final checkpoint at
    # the stop (the periodic ones are at multiples of 5 s).
    assert os.path.exists(os.path.join(out, "metrics.csv"))
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["stopped"].startswith("stopped by request: KeyboardInterrupt")
    newest = max(os.listdir(os.path.join(out, "checkpoints")))
    manifest = json.load(open(os.path.join(out, "checkpoints", newest, "manifest.json")))
    assert manifest["train_s"] == pytest.approx(summary["train_s"])


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
