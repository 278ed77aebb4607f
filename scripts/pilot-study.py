#!/usr/bin/env python3
"""Can a short pilot choose K? (issue 32, exploratory)

The best constant K of a cell, chosen on one seed's whole run, is within
1.5 pp of the best fixed policy on the other seeds in 91 % of the random
cells (scripts/k-law.py --test). A pilot is the cheap version: every K
policy the cell measured runs for the first fraction f of the budget, and
the K with the best interval-mean test accuracy over [0, f x budget] is
kept. This reads the runs of committed sweeps (their metrics.csv; the
prefix of a run is the pilot, since the random families' rates are
constant), chooses on one seed, and scores the choice's whole-run interval
mean on the other two seeds against their best fixed policy (as in
sweep.json), each seed in turn.

Usage: scripts/pilot-study.py RUNS/random-2030-01 RUNS/random-2030-02 ...
  (each an `hsgd sweep examples/sweep/random/FAMILY.toml --out RUNS/FAMILY`
  output directory, with its cells/ and sweep.json)"""
import csv
import json
import os
import re
import sys

FRACTIONS = [0.05, 0.1, 0.25, 0.5, 1.0]


def is_k(policy):
    return policy in ("async", "sync") or re.fullmatch(r"kasync:\d+", policy) is not None


def prefix_mean(path, frac):
    """Interval mean (trapezoid over the rows, as hsgd's) of test_acc over
    the rows up to frac of the run's last row time."""
    with open(path) as f:
        rows = [(float(r["time_s"]), float(r["test_acc"])) for r in csv.DictReader(f)]
    end = rows[-1][0] * frac
    area, span = 0.0, 0.0
    for (t0, a0), (t1, a1) in zip(rows, rows[1:]):
        if t0 >= end - 1e-9:
            break
        if t1 > end:  # the row that crosses the end, cut there
            a1 = a0 + (a1 - a0) * (end - t0) / (t1 - t0)
            t1 = end
        area += 0.5 * (a0 + a1) * (t1 - t0)
        span += t1 - t0
    return area / span if span > 0 else float("nan")


def sanitize(policy):
    return re.sub(r"[^A-Za-z0-9._+-]", "-", policy)


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) >= 2 else 2)
    folds = {f: [] for f in FRACTIONS}
    auto_folds = {}
    runs_per_pilot = []
    cells = 0
    for out in sys.argv[1:]:
        with open(os.path.join(out, "sweep.json")) as f:
            sweep = json.load(f)
        axes = [a["key"] for a in sweep["axes"]]
        for cell in sweep["cells"]:
            name = "_".join(f"{k}-{cell['at'][k]}" for k in axes) or "all"
            cdir = os.path.join(out, "cells", sanitize(name))
            if not os.path.isdir(cdir):
                sys.exit(f"{cdir}: not found (is {out} the sweep's output directory?)")
            seeds = {p: v["interval_mean"]["seeds"] for p, v in cell["policies"].items()
                     if not p.startswith("auto")}
            autos = {p: v["interval_mean"]["seeds"] for p, v in cell["policies"].items()
                     if p.startswith("auto")}
            ks = [p for p in seeds if is_k(p)]
            seed_ids = sweep["seeds"]
            cells += 1
            runs_per_pilot.append(len(ks))
            for held, sid in enumerate(seed_ids):
                rest = lambda p: (sum(x for i, x in enumerate(seeds[p]) if i != held)
                                   / (len(seed_ids) - 1))
                best_rest = max(rest(p) for p in seeds)
                for p, v in autos.items():  # the auto rules the sweep ran, on the same folds
                    auto_folds.setdefault(p, []).append(
                        (sum(x for i, x in enumerate(v) if i != held) / (len(seed_ids) - 1)
                         - best_rest) * 100)
                for frac in FRACTIONS:
                    score = {p: prefix_mean(os.path.join(cdir, sanitize(p), f"seed-{sid}",
                                                         "metrics.csv"), frac) for p in ks}
                    pick = max(ks, key=lambda p: score[p])
                    folds[frac].append((rest(pick) - best_rest) * 100)
    print(f"{cells} cells, {len(folds[1.0])} folds (the K chosen on one seed, scored on the "
          f"other two against their best fixed policy); {min(runs_per_pilot)} to "
          f"{max(runs_per_pilot)} K policies per cell\n")
    print("| pilot (fraction of the budget) | pilot cost (runs) | within 1.5 pp | worst | mean |")
    print("|---:|---:|---:|---:|---:|")
    mean_k = sum(runs_per_pilot) / len(runs_per_pilot)
    for frac, g in folds.items():
        print(f"| {frac:g} | {frac * mean_k:.2f} | {sum(x >= -1.5 for x in g)} of {len(g)} "
              f"({100 * sum(x >= -1.5 for x in g) / len(g):.0f} %) | {min(g):+.2f} | "
              f"{sum(g) / len(g):+.2f} |")
    for p, g in sorted(auto_folds.items()):
        print(f"| {p} (no pilot) | 0 | {sum(x >= -1.5 for x in g)} of {len(g)} "
              f"({100 * sum(x >= -1.5 for x in g) / len(g):.0f} %) | {min(g):+.2f} | "
              f"{sum(g) / len(g):+.2f} |")


if __name__ == "__main__":
    main()
