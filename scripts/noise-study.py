#!/usr/bin/env python3
"""The gradient noise scale (train.noise_scale) on auto's held-out families
(issue 32): does it tell the cells where a policy that waits (K > 1) beats
async from those where async is best? Exploratory: every family named here
has been looked at before, so this can suggest a rule, never test one.

For each family (examples/sweep/FAMILY.toml), runs its cells once with
`sync` and once with `async`, seed 1, the noise scale on (a sweep in
OUT/FAMILY/), and reads from each run's metrics.csv, by column name, the
median noise_scale over its rows in the first `--head` virtual seconds and
over the whole run. Against it, from the committed sweep
(docs/results/sweep/FAMILY/sweep.json, seeds 1-3), the best fixed policy
and best − async. The "temperature" lr x B / b (b the batch) is the ratio
of the gradient noise a step adds to the step itself.

Usage: scripts/noise-study.py --hsgd build/release/hsgd --out runs/noise-study
                              [--families A,B,...] [--jobs 2] [--report]"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tomllib

from sweepfiles import flat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# auto's clean held-out families of the fourteenth and sixteenth rules.
FAMILIES = ["heldout-momentum-synthetic-20", "heldout-nesterov-40", "heldout-momentum-fmnist-softmax",
            "heldout-momentum-fmnist-mlp-12", "heldout-nesterov-lenet-6", "heldout-sgd-softmax-12",
            "heldout-momentum-lenet-12", "heldout-nesterov-fmnist-mlp-24",
            "heldout-momentum-softmax-synthetic-8", "heldout-momentum-mlp2-synthetic-16",
            "heldout-momentum-lenet-16", "heldout-nesterov-softmax-fmnist-10",
            "heldout-momentum-fmnist-mlp-32", "heldout-momentum-synthetic-6"]
POLICIES = ["sync+train.noise_scale=true", "async+train.noise_scale=true"]
WAITING = re.compile(r"^(sync|kasync|hybrid|kbatch)")


def grid_of(family, out):
    """The family's sweep file with the two noise runs, seed 1."""
    src = os.path.join(ROOT, "examples", "sweep", family + ".toml")
    with open(src) as f:
        text = f.read()
    text = re.sub(r'^config = "(.*)"', lambda m: 'config = "' + os.path.normpath(
        os.path.join(ROOT, "examples", "sweep", m.group(1))) + '"', text, count=1, flags=re.M)
    text = re.sub(r"^seeds = \[.*\]", "seeds = [1]", text, count=1, flags=re.M)
    text = re.sub(r"^policies = \[.*?\]", "policies = " + json.dumps(POLICIES), text, count=1,
                  flags=re.M | re.S)
    text = re.sub(r'^candidate = ".*"\n', "", text, count=1, flags=re.M)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "grid.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def medians(path, head):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    vals = [(float(r["time_s"]), float(r["noise_scale"])) for r in rows]
    vals = [(t, v) for t, v in vals if math.isfinite(v)]
    first = [v for t, v in vals if t <= head]
    return (statistics.median(first) if first else math.nan,
            statistics.median([v for _, v in vals]) if vals else math.nan)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hsgd", default=os.path.join(ROOT, "build", "release", "hsgd"))
    ap.add_argument("--out", default="runs/noise-study")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--head", type=float, default=20.0)
    ap.add_argument("--report", action="store_true", help="read the runs only")
    a = ap.parse_args()
    rows = []
    for fam in a.families.split(","):
        out = os.path.join(a.out, fam)
        if not a.report:
            grid = grid_of(fam, out)
            subprocess.run([a.hsgd, "sweep", grid, "--out", out, "--jobs", str(a.jobs)],
                           check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(ROOT, "examples", "sweep", fam + ".toml"), "rb") as f:
            spec = tomllib.load(f)
        sets = flat(spec.get("set", {}))
        with open(os.path.normpath(os.path.join(ROOT, "examples", "sweep", spec["config"])),
                  "rb") as f:
            base = flat(tomllib.load(f))
        cfg = {**base, **sets}
        with open(os.path.join(ROOT, "docs", "results", "sweep", fam, "sweep.json")) as f:
            committed = json.load(f)
        for cell in committed["cells"]:
            at = cell["at"]
            pol = cell["policies"]
            fixed = {p: v["interval_mean"]["mean"] for p, v in pol.items()
                     if not p.startswith("auto")}
            best = max(fixed, key=fixed.get)
            name = ",".join(f"{k}-{v}" for k, v in at.items())
            lr = float(at.get("optim.lr", cfg.get("optim.lr", 0)))
            b = int(at.get("train.batch", cfg.get("train.batch", 64)))
            got = {}
            for p in POLICIES:
                csvp = os.path.join(out, "cells", name, p.replace("=", "-"), "seed-1",
                                    "metrics.csv")
                got[p] = medians(csvp, a.head)
            rows.append((fam, at, best, 100 * (fixed[best] - fixed["async"]), lr, b, got))
    print("| family | cell | best fixed | best − async (pp) | B sync, first "
          f"{a.head:g} s | B sync | B async, first {a.head:g} s | B async | lr x B / b (sync, first) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for fam, at, best, gain, lr, b, got in rows:
        s0, s1 = got[POLICIES[0]]
        a0, a1 = got[POLICIES[1]]
        cell = ", ".join(f"{k} {v}" for k, v in at.items())
        print(f"| {fam[len('heldout-'):]} | {cell} | {best} | {gain:+.2f} | {s0:.0f} | {s1:.0f} | "
              f"{a0:.0f} | {a1:.0f} | {lr * s0 / b:.3f} |")
    # How well each measure orders "a waiting policy is best by >= 1 pp" above the rest.
    print()
    wins = [r for r in rows if WAITING.match(r[2]) and r[3] >= 1.0]
    rest = [r for r in rows if r not in wins]
    for label, key in [("B sync, first", lambda r: r[6][POLICIES[0]][0]),
                       ("B async, first", lambda r: r[6][POLICIES[1]][0]),
                       ("lr x B / b (sync, first)", lambda r: r[4] * r[6][POLICIES[0]][0] / r[5])]:
        pairs = [(key(w), key(o)) for w in wins for o in rest
                 if math.isfinite(key(w)) and math.isfinite(key(o))]
        auc = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x, y in pairs) / len(pairs) \
            if pairs else math.nan
        print(f"- {label}: ranks a cell where a waiting policy beats async by >= 1 pp above a "
              f"cell where none does in {auc:.2f} of the {len(pairs)} pairs "
              f"({len(wins)} such cells of {len(rows)}; 0.5 is chance)")


if __name__ == "__main__":
    main()
