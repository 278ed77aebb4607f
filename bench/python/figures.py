#!/usr/bin/python3
"""The Python module's figures for BENCHMARKS.md (issue 26); `make bench-python`.

1. Overhead against the CLI: the same LeNet-5 job on the threads runtime
   (Fashion-MNIST, 2 workers, hybrid, batch 64, lr 0.01, --seconds of
   training) from `hsgd train` and from hsgd.train (in this process),
   alternated for --rounds rounds each (the one that goes first alternates
   too); samples/s from each run's summary.json; the median of the per-round
   ratios Python / CLI.
2. Zero copy: the peak RSS (ru_maxrss) of a process that trains on a
   --gb GB float32 NumPy array held in memory (softmax, 1x28x28 samples,
   threads, 2 workers) against `hsgd train` on the same data from .npy files;
   and of a process that only loads the array. Growth = Python - file.
3. Ctrl-C: the time from SIGINT to the KeyboardInterrupt in a child training
   a long simulation (softmax on Gaussian blobs, sim, 4 workers, a budget of
   1e6 s, a final checkpoint written on the way out), --rounds times; median
   and largest. tests/python/test_callbacks.py checks that the stop happens
   and what it writes; the time is this figure's.

Usage: PYTHONPATH=build/release/python bench/python/figures.py --hsgd build/release/hsgd
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD_TRAIN = r"""
import resource, sys, numpy as np
import hsgd
x = np.load({x!r}); y = np.load({y!r})
xt = np.load({xt!r}); yt = np.load({yt!r})
hsgd.train("softmax", data=(x, y), test=(xt, yt), runtime="threads", workers=2, batch=64,
           budget={seconds}, out={out!r}, progress=False, set={{"train.eval_every": 1.0}})
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

CHILD_LOAD = r"""
import resource, numpy as np
x = np.load({x!r}); y = np.load({y!r}); xt = np.load({xt!r}); yt = np.load({yt!r})
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


CHILD_SIGINT = r"""
import sys, time
import numpy as np
import hsgd
rng = np.random.default_rng(1)
centres = rng.normal(0, 1.5, size=(5, 20)).astype(np.float32)
y = rng.integers(0, 5, size=1500)
x = (centres[y] + rng.normal(0, 1, size=(1500, 20))).astype(np.float32)
said = []
def callback(row):
    if row["time_s"] >= 1.0 and not said:
        said.append(1)
        print("started", flush=True)
try:
    hsgd.train("softmax", data=(x[:1200], y[:1200]), test=(x[1200:], y[1200:]), runtime="sim",
               workers=4, batch=32, lr=0.05, budget=1e6, out={out!r}, callback=callback,
               progress=False, set={{"sim.compute_time": 0.01, "sim.server_ns_per_param": 1.0,
                                     "train.eval_every": 0.5, "train.checkpoint_every": 1000.0}})
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
"""


def sps(out):
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)["samples_per_s"]


def overhead(args, tmp):
    import hsgd
    ratios, cli_rates, py_rates = [], [], []
    for r in range(args.rounds):
        common = dict(workers=2, batch=64, lr=0.01, budget=args.seconds, seed=1 + r)
        cli_out = os.path.join(tmp, f"cli-{r}")
        py_out = os.path.join(tmp, f"py-{r}")

        def cli_run():
            subprocess.run([args.hsgd, "train", "--model", "lenet5", "--data", "fashion-mnist",
                            "--runtime", "threads", "--policy", "hybrid", "--workers", "2",
                            "--batch", "64", "--lr", "0.01", "--budget", str(args.seconds),
                            "--seed", str(1 + r), "--out", cli_out, "--quiet"], check=True)

        def py_run():
            hsgd.train("lenet5", data="fashion-mnist", runtime="threads", policy="hybrid",
                       out=py_out, progress=False, **common)

        # Alternated, and which goes first alternates too (round 0: the CLI).
        for run in ((cli_run, py_run) if r % 2 == 0 else (py_run, cli_run)):
            run()
        c, p = sps(cli_out), sps(py_out)
        cli_rates.append(c)
        py_rates.append(p)
        ratios.append(p / c)
        print(f"round {r}: CLI {c:.0f} samples/s, Python {p:.0f} samples/s, ratio {p / c:.4f}",
              flush=True)
    print(f"overhead: LeNet-5, threads, 2 workers, {args.seconds:g} s x {args.rounds} rounds: "
          f"median CLI {statistics.median(cli_rates):.0f}, Python "
          f"{statistics.median(py_rates):.0f} samples/s; median ratio "
          f"{statistics.median(ratios):.4f}")


def zero_copy(args, tmp):
    n = int(args.gb * 1e9 / (784 * 4))
    rng = np.random.default_rng(0)
    paths = {k: os.path.join(tmp, f"{k}.npy") for k in ("x", "y", "xt", "yt")}
    x = np.lib.format.open_memmap(paths["x"], mode="w+", dtype=np.float32, shape=(n, 1, 28, 28))
    for s in range(0, n, 65536):
        x[s:s + 65536] = rng.random((min(65536, n - s), 1, 28, 28), dtype=np.float32)
    x.flush()
    del x
    np.save(paths["y"], rng.integers(0, 10, size=n))
    np.save(paths["xt"], rng.random((2000, 1, 28, 28), dtype=np.float32))
    np.save(paths["yt"], rng.integers(0, 10, size=2000))
    array_mb = n * 784 * 4 / 1e6
    env = dict(os.environ)

    def child(code):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, check=True)
        return int(p.stdout.split()[-1]) / 1024  # MiB (ru_maxrss is in KiB)

    load = child(CHILD_LOAD.format(**paths))
    py = child(CHILD_TRAIN.format(**paths, seconds=args.rss_seconds,
                                  out=os.path.join(tmp, "rss-py")))
    cli_cmd = [args.hsgd, "train", "--model", "softmax", "--data",
               f"npy:{paths['x']},{paths['y']}", "--test-data",
               f"npy:{paths['xt']},{paths['yt']}", "--runtime", "threads", "--workers", "2",
               "--batch", "64", "--budget", str(args.rss_seconds), "--eval-every", "1",
               "--out", os.path.join(tmp, "rss-cli"), "--quiet"]
    # In a fresh child, so that no earlier child's peak counts.
    cli = child("import resource, subprocess\n"
                f"subprocess.run({cli_cmd!r}, check=True)\n"
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    growth = py - cli
    print(f"zero copy: {n} samples x 784 float32 = {array_mb:.0f} MB array; peak RSS: "
          f"array loaded only {load:.0f} MiB, hsgd.train on the array {py:.0f} MiB, "
          f"hsgd train on the .npy files {cli:.0f} MiB; growth over the file run "
          f"{growth:+.0f} MiB = {100 * growth * 1.048576 / array_mb:+.1f} % of the array; "
          f"over the array alone {py - load:+.0f} MiB")


def ctrl_c(args, tmp):
    waits = []
    for r in range(args.rounds):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD_SIGINT.format(out=os.path.join(tmp, f"sigint-{r}"))],
            stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "started"
            time.sleep(0.3)
            sent = time.monotonic()
            child.send_signal(signal.SIGINT)
            # Its output up to its exit, 60 s at most (a child that ignored
            # the signal would run for hours).
            rest, _ = child.communicate(timeout=60)
        finally:
            child.kill()
        line = rest.split()
        assert line[:1] == ["interrupted"], rest
        waits.append(float(line[1]) - sent)
        print(f"round {r}: SIGINT to KeyboardInterrupt {waits[-1]:.3f} s", flush=True)
    print(f"ctrl-c: softmax, sim, 4 workers, {args.rounds} rounds: SIGINT to KeyboardInterrupt "
          f"median {statistics.median(waits):.3f} s, largest {max(waits):.3f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hsgd", default="build/release/hsgd")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--rss-seconds", type=float, default=3.0)
    ap.add_argument("--only", choices=["overhead", "zero-copy", "ctrl-c"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hsgd-bench-python-") as tmp:
        if args.only in (None, "overhead"):
            overhead(args, tmp)
        if args.only in (None, "zero-copy"):
            zero_copy(args, tmp)
        if args.only in (None, "ctrl-c"):
            ctrl_c(args, tmp)


if __name__ == "__main__":
    main()
