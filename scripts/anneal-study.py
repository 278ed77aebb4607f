#!/usr/bin/env python3
"""Is `hybrid`'s win at small rates its step decay? (issue 32)

With mean aggregation an update of K pushes moves as far as one push, so
each push under `hybrid` moves the parameters by lr / K(t). The step
schedule raises K by one every 3 / lr updates (policies.md), so after p
pushes K is about sqrt(2 p lr / 3), and a push's step about
lr x sqrt(3 / (2 lr p)): a 1 / sqrt(p) decay. `async` with the
Robbins-Monro schedule lr0 x (t + tau)^-kappa, kappa = 1/2,
tau = 3 / (2 lr) and lr0 = sqrt(3 lr / 2) (so its first step is lr) takes
the same per-push steps without waiting for anyone.

--write writes that `async` for each cell below (a random family's cell:
six where `hybrid` or a K above 1 beats `async` at a rate within the
staleness budget, six where `async` is best) to
examples/sweep/anneal/FAMILY.toml; --report compares its interval mean
with the family's committed sweep (docs/results/sweep/FAMILY/ and
docs/results/sweep/anneal-FAMILY/).

Usage: scripts/anneal-study.py --write
       for f in examples/sweep/anneal/*.toml; do
         hsgd sweep $f --out runs/anneal/anneal-$(basename $f .toml) --jobs 2; done
       scripts/anneal-study.py --report"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweepfiles import one_policy_sweep  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (family, cell lr): random cells at a rate within the staleness budget
# (auto starts there as async), chosen from the committed sweeps before this
# ran: six where a waiting policy beats async by 1.3 pp or more (hybrid, or
# kasync:2 with hybrid ahead of async), and six where async is best and
# hybrid at least 1.1 pp behind it.
CELLS = [("random-2026-07", 0.06), ("random-2026-08", 0.0017), ("random-2026-12", 0.0017),
         ("random-2027-08", 0.0063), ("random-2028-03", 0.06), ("random-2028-09", 0.00042),
         ("random-2026-03", 0.016), ("random-2028-01", 0.01), ("random-2028-02", 0.0052),
         ("random-2028-05", 0.026), ("random-2028-06", 0.0035), ("random-2028-08", 0.011)]


def schedule(lr):
    """The Robbins-Monro keys whose per-push step is hybrid's at rate lr."""
    return {"optim.lr_schedule": "robbins-monro", "optim.kappa": 0.5, "optim.tau": 1.5 / lr}


def write():
    out = os.path.join(ROOT, "examples", "sweep", "anneal")
    os.makedirs(out, exist_ok=True)
    for family, lr in CELLS:
        src = os.path.join(ROOT, "examples", "sweep", "random", family + ".toml")
        path = os.path.join(out, family + ".toml")
        one_policy_sweep(src, "async", path, schedule(lr), drop=("optim.lr",), relative=True)
        with open(path) as f:
            text = f.read()
        lr0 = math.sqrt(1.5 * lr)
        text = text[:text.index("[axes]")] + f"[axes]\noptim.lr = [{lr0!r}]\n"
        head = (f"# Issue 32: async with the step decay of hybrid's step schedule at lr {lr:g}\n"
                f"# (the cell optim.lr = {lr:g} of examples/sweep/random/{family}.toml):\n"
                f"# lr0 x (t + tau)^-1/2, lr0 = sqrt(1.5 x {lr:g}), tau = 1.5 / {lr:g}.\n"
                f"# Written by scripts/anneal-study.py --write; outputs:\n"
                f"# docs/results/sweep/anneal-{family}/.\n")
        with open(path, "w") as f:
            f.write(head + text)


def interval(path, lr=None):
    with open(path) as f:
        cells = json.load(f)["cells"]
    if lr is not None:
        cells = [c for c in cells if float(c["at"]["optim.lr"]) == lr]
    return {k: v["interval_mean"]["mean"] for k, v in cells[0]["policies"].items()}


def report():
    sweeps = os.path.join(ROOT, "docs", "results", "sweep")
    print("| family, cell | best fixed | best (%) | annealed async − best | hybrid − best "
          "| async − best | auto − best |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for family, lr in CELLS:
        path = os.path.join(sweeps, "anneal-" + family, "sweep.json")
        if not os.path.exists(path):
            print(f"| {family} lr {lr:g} | not run | | | | | |")
            continue
        annealed = interval(path)["async"]
        pol = interval(os.path.join(sweeps, family, "sweep.json"), lr)
        fixed = {k: v for k, v in pol.items() if not k.startswith("auto")}
        best = max(fixed, key=fixed.get)
        auto = [k for k in pol if k.startswith("auto")]
        auto = next((k for k in auto if k.endswith("=18")), auto[0])
        if not auto.endswith("=18"):  # a draw before the eighteenth: its run alone
            seen = os.path.join(sweeps, "eighteenth-" + family, "sweep.json")
            if os.path.exists(seen):
                pol[auto] = interval(seen, lr)["auto+policy.auto_rule=18"]

        def gap(x):
            return f"{100 * (x - fixed[best]):+.2f}"
        print(f"| {family} lr {lr:g} | {best} | {100 * fixed[best]:.2f} | {gap(annealed)} | "
              f"{gap(fixed['hybrid'])} | {gap(fixed['async'])} | {gap(pol[auto])} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    if not (a.write or a.report):
        ap.error("give --write or --report")
    if a.write:
        write()
    if a.report:
        report()


if __name__ == "__main__":
    main()
