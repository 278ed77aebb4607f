#!/usr/bin/env python3
"""hsgd against PyTorch's own data-parallel recipes, same network and settings.

LeNet-5 (28x28 input padded by 2: 61,706 parameters, the layers of hsgd's
`lenet5`), batch 64 per worker, lr 0.05, momentum 0.9, Fashion-MNIST from
Debian's dataset-fashion-mnist, standardized with the training set's mean and
std (as hsgd does). Every run trains for --seconds of training time and is
evaluated on the first --eval-samples test samples every second of training
time; evaluation time is excluded on both sides. Peers:

  torch-single   one process, one thread, torch.optim.SGD
  torch-ddp      DistributedDataParallel, gloo, 2 processes (one thread each)
  torch-hogwild  the official Hogwild recipe: shared-memory model, 2 processes,
                 one SGD optimizer (with momentum) per process
  hsgd-*         build/release/hsgd train --runtime threads, 2 workers
                 (hsgd-async-mc: async with staleness.momentum_correction)

Runs are interleaved round by round. Prints samples/s, ratio to the named
peer, time to the target accuracy, final accuracy (medians over rounds).
Needs Debian's python3-torch (make bench-peers installs it).
"""
import argparse
import csv
import gzip
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"
BATCH, LR, MOMENTUM = 64, 0.05, 0.9


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(eval_samples):
    xtr = read_idx(f"{DATA}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    ytr = read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64)
    xte = read_idx(f"{DATA}/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    yte = read_idx(f"{DATA}/t10k-labels-idx1-ubyte.gz").astype(np.int64)
    mean, std = float(xtr.mean()), float(xtr.std())
    xtr, xte = (xtr - mean) / std, (xte - mean) / std
    n = eval_samples if eval_samples > 0 else len(yte)
    return (torch.from_numpy(xtr).unsqueeze(1), torch.from_numpy(ytr),
            torch.from_numpy(xte[:n]).unsqueeze(1), torch.from_numpy(yte[:n]))


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1, self.f2, self.f3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = x.flatten(1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))


def accuracy(model, xte, yte):
    with torch.no_grad():
        return float((model(xte).argmax(1) == yte).float().mean())


def batches(n, shard, seed):
    g = torch.Generator().manual_seed(seed)
    while True:
        order = shard[torch.randperm(len(shard), generator=g)]
        for i in range(0, len(order) - BATCH + 1, BATCH):
            yield order[i:i + BATCH]


def run_single(args, data):
    torch.set_num_threads(1)
    xtr, ytr, xte, yte = data
    torch.manual_seed(1)
    model = LeNet5()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    rows, samples, train_s, next_eval = [], 0, 0.0, 1.0
    it = batches(len(ytr), torch.arange(len(ytr)), 1)
    t0 = time.perf_counter()
    while train_s < args.seconds:
        idx = next(it)
        opt.zero_grad()
        F.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
        opt.step()
        samples += BATCH
        train_s = time.perf_counter() - t0
        if train_s >= next_eval or train_s >= args.seconds:
            e0 = time.perf_counter()
            rows.append((train_s, samples, accuracy(model, xte, yte)))
            t0 += time.perf_counter() - e0  # evaluation is not training time
            next_eval += 1.0
    return rows


def ddp_worker(rank, args, data, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    xtr, ytr, xte, yte = data
    torch.manual_seed(1)
    model = nn.parallel.DistributedDataParallel(LeNet5())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    shard = torch.arange(rank, len(ytr), 2)
    it = batches(len(ytr), shard, 1 + rank)
    rows, steps, train_s, next_eval = [], 0, 0.0, 1.0
    t0 = time.perf_counter()
    stop = torch.zeros(1)
    while True:
        idx = next(it)
        opt.zero_grad()
        F.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
        opt.step()
        steps += 1
        train_s = time.perf_counter() - t0
        stop[0] = 1.0 if train_s >= args.seconds else 0.0
        dist.all_reduce(stop)  # both ranks stop after the same step
        do_eval = torch.tensor([1.0 if train_s >= next_eval else 0.0])
        dist.all_reduce(do_eval)
        if do_eval[0] > 0 or stop[0] > 0:
            e0 = time.perf_counter()
            if rank == 0:
                rows.append((train_s, 2 * BATCH * steps, accuracy(model.module, xte, yte)))
            dist.barrier()
            t0 += time.perf_counter() - e0
            next_eval += 1.0
        if stop[0] > 0:
            break
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def run_ddp(args, data):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = 29500 + (os.getpid() % 1000)
    procs = [ctx.Process(target=ddp_worker, args=(r, args, data, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    rows = q.get()
    for p in procs:
        p.join()
    return rows


def hogwild_worker(rank, model, data, state):
    torch.set_num_threads(1)
    xtr, ytr = data[0], data[1]
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    it = batches(len(ytr), torch.arange(rank, len(ytr), 2), 1 + rank)
    # state: [stop, pause, rank 0 paused, rank 1 paused, steps of rank 0, steps of rank 1]
    while state[0] == 0:
        if state[1] != 0:
            state[2 + rank] = 1
            while state[1] != 0 and state[0] == 0:
                time.sleep(0.0005)
            state[2 + rank] = 0
            continue
        idx = next(it)
        opt.zero_grad()
        F.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
        opt.step()
        state[4 + rank] += 1


def run_hogwild(args, data):
    torch.set_num_threads(1)
    xtr, ytr, xte, yte = data
    torch.manual_seed(1)
    model = LeNet5()
    model.share_memory()
    state = torch.zeros(6, dtype=torch.int64).share_memory_()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=hogwild_worker, args=(r, model, (xtr, ytr), state)) for r in range(2)]
    for p in procs:
        p.start()
    # Training time starts when both workers have stepped once.
    while state[4] == 0 or state[5] == 0:
        time.sleep(0.001)
    rows, train_s, next_eval = [], 0.0, 1.0
    s0 = int(state[4] + state[5])
    t0 = time.perf_counter()
    while True:
        time.sleep(0.01)
        train_s = time.perf_counter() - t0
        if train_s >= next_eval or train_s >= args.seconds:
            e0 = time.perf_counter()
            state[1] = 1
            while state[2] == 0 or state[3] == 0:  # both workers paused
                time.sleep(0.0005)
            train_s = e0 - t0
            rows.append((train_s, BATCH * int(state[4] + state[5] - s0), accuracy(model, xte, yte)))
            state[1] = 0
            t0 += time.perf_counter() - e0
            next_eval += 1.0
            if train_s >= args.seconds:
                break
    state[0] = 1
    for p in procs:
        p.join()
    return rows


def run_hsgd(args, policy, extra=()):
    out = tempfile.mkdtemp(prefix="hsgd-peers-")
    cmd = [args.hsgd, "train", "--runtime", "threads", "--model", "lenet5", "--data", "fashion-mnist",
           "--workers", "2", "--batch", str(BATCH), "--lr", str(LR), "--policy", policy,
           "--budget", str(args.seconds), "--eval-every", "1", "--quiet", "--out", out,
           "--set", f"train.eval_samples={args.eval_samples}"]
    if policy != "hogwild":  # hsgd's hogwild is plain SGD (no momentum): README
        cmd += ["--set", "optim.kind=momentum", "--set", f"optim.momentum={MOMENTUM}"]
    for kv in extra:
        cmd += ["--set", kv]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = []
    with open(os.path.join(out, "metrics.csv")) as f:
        for r in csv.DictReader(f):
            if float(r["time_s"]) > 0:
                rows.append((float(r["time_s"]), int(r["samples"]), float(r["test_acc"])))
    return rows


def summarize(rows, target, low):
    t, n, _ = rows[-1]
    reach = next((r[0] for r in rows if r[2] >= target), float("nan"))
    reach_low = next((r[0] for r in rows if r[2] >= low), float("nan"))
    return n / t, reach, rows[-1][2], reach_low


def medians(rounds):
    """Per-run medians over rounds of (samples/s, time to target, final
    accuracy, time to the low target). A target not reached in a round
    counts as an infinite time (it is later than any reached one), so the
    median is "not reached" only when most rounds did not reach it; NaN
    would make the median depend on the order of the rounds."""
    untimed = lambda t: math.inf if t != t else t
    return (statistics.median(x[0] for x in rounds),
            statistics.median(untimed(x[1]) for x in rounds),
            statistics.median(x[2] for x in rounds),
            statistics.median(untimed(x[3]) for x in rounds))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="training seconds per run")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--target", type=float, default=0.85, help="test accuracy for time-to")
    ap.add_argument("--low-target", type=float, default=0.75,
                    help="a second, lower accuracy for time-to (short or loaded runs)")
    ap.add_argument("--eval-samples", type=int, default=2000)
    ap.add_argument("--hsgd", default="build/release/hsgd")
    ap.add_argument("--only", default="", help="comma-separated subset of the runs")
    args = ap.parse_args()
    data = load(args.eval_samples)
    runs = {
        "torch-single": lambda: run_single(args, data),
        "torch-ddp": lambda: run_ddp(args, data),
        "torch-hogwild": lambda: run_hogwild(args, data),
        "hsgd-sync": lambda: run_hsgd(args, "sync"),
        "hsgd-async": lambda: run_hsgd(args, "async"),
        # async with the staleness-corrected momentum (docs/policies.md)
        "hsgd-async-mc": lambda: run_hsgd(args, "async", ["staleness.momentum_correction=true"]),
        "hsgd-hybrid": lambda: run_hsgd(args, "hybrid"),
        "hsgd-hogwild": lambda: run_hsgd(args, "hogwild"),
    }
    if args.only:
        runs = {k: v for k, v in runs.items() if k in args.only.split(",")}
    res = {k: [] for k in runs}
    for r in range(args.rounds):
        for name, fn in runs.items():
            res[name].append(summarize(fn(), args.target, args.low_target))
            print(f"round {r}: {name:14s} {res[name][-1][0]:9.0f} samples/s, "
                  f"to {args.low_target:.0%}: {res[name][-1][3]:6.1f} s, "
                  f"to {args.target:.0%}: {res[name][-1][1]:6.1f} s, final {res[name][-1][2]:.4f}",
                  file=sys.stderr, flush=True)
    peer = {"hsgd-sync": "torch-ddp", "hsgd-async": "torch-ddp", "hsgd-async-mc": "torch-ddp",
            "hsgd-hybrid": "torch-ddp",
            "hsgd-hogwild": "torch-hogwild"}
    med = {k: medians(v) for k, v in res.items()}
    print(f"| run | samples/s | ratio to peer | time to {args.low_target:.0%} (s) "
          f"| time to {args.target:.0%} (s) | final accuracy |")
    print("|---|---:|---:|---:|---:|---:|")
    fmt_t = lambda x: "not reached" if x == math.inf else f"{x:.1f}"
    for k, (sps, reach, acc, reach_low) in med.items():
        p = peer.get(k)
        ratio = f"{sps / med[p][0]:.2f} ({p})" if p in med else ""
        print(f"| {k} | {sps:,.0f} | {ratio} | {fmt_t(reach_low)} | {fmt_t(reach)} | {acc:.4f} |")


if __name__ == "__main__":
    main()
