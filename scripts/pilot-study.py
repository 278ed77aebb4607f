#!/usr/bin/env python3
"""Can a short pilot choose K? (issue 32, exploratory)

The best constant K of a cell, chosen on one seed's whole run, is within
1.5 pp of the best fixed policy on the other seeds in 91 % of the random
cells (scripts/k-law.py --test). A pilot is the cheap version: every K
policy the cell measured runs for the first fraction f of the budget, and
the K whose forecast is best is kept:
  mean    the interval-mean test accuracy over [0, f x budget];
  last    the test accuracy at f x budget (the last row up to it);
  logfit  the interval mean over the whole budget, the part after
          f x budget forecast by a least-squares fit acc = a + b ln t to
          the rows in (0, f x budget] (at least 3), clamped to [0, 1].
This reads the runs of sweeps (their metrics.csv; the prefix of a run is
the pilot, since the random families' rates are constant), chooses on one
seed, and scores the choice's whole-run interval mean on the other two
seeds against their best fixed policy (from the sweep's sweep.json, or
with --committed from docs/results/sweep/FAMILY/sweep.json, where every
fixed policy ran: then the run directories need only the K policies),
each seed in turn.

--same-seed scores as `auto` with `policy.auto_pilot` runs (issue 32's own
scoring, examples/sweep/auto-pilot/README.md): each seed's pilot chooses that
seed's run; per cell, the mean over the seeds of the chosen runs' interval
means against the best fixed policy's mean. With --product DIR (the output
directories of the same families' `auto+policy.auto_pilot=F` sweeps, one
per family under DIR), the product's per-seed figures are compared with the
prediction at F and its cells scored alike.

--candidates k+hybrid adds hybrid and async with the momentum correction to
the K policies, as policy.auto_candidates = "k+hybrid" does; k+rule adds
auto's rule (the sweep's auto+policy.auto_rule=18 runs: a pilot of the rule
is the beginning of its run, and a choice of it is that run), as "k+rule"
does; --window W
ranks by the interval mean over the last share W of the pilot, as
policy.auto_pilot_window = W does; --margin D keeps the largest K within D
of the best K's figure, as policy.auto_pilot_margin = D does; --keep M runs
a second round, as policy.auto_pilot_keep = M does: the best M of the first
continue to twice the share (their runs, cut there) and the choice is among
them (the cost column counts the second round).

Usage: scripts/pilot-study.py [--forecast mean|last|logfit] [--committed]
                              [--candidates k|k+hybrid|k+rule] [--window W]
                              [--margin D] [--keep M]
                              [--same-seed [--product DIR]] RUNS/FAMILY ...
  (each an `hsgd sweep ... --out RUNS/FAMILY` output directory, with its
  cells/ and sweep.json)"""
import argparse
import csv
import json
import math
import os
import re
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRACTIONS = [0.05, 0.1, 0.2, 0.25, 0.5, 1.0]


def is_k(policy):
    return policy in ("async", "sync") or re.fullmatch(r"kasync:\d+", policy) is not None


# auto's candidate sets (policy.auto_candidates; pilot_candidates in
# src/hsgd/runtime/pilot.cc): "k", the K policies; "k+hybrid", those, hybrid
# and async with the momentum correction (the random families run it only
# with server momentum, as the pilot does); "k+rule", the K policies and
# auto's rule (the families' auto+policy.auto_rule=18).
def candidate_of(which):
    extra = {"k": (), "k+hybrid": ("hybrid", "async+staleness.momentum_correction=true"),
             "k+rule": ("auto+policy.auto_rule=18",)}[which]
    return lambda p: is_k(p) or p in extra


# The pilot's name for a candidate -> the sweeps' (policy.auto_choice = "rule").
RULE = {"rule": "auto+policy.auto_rule=18"}


def pilot_order(policies):
    """The candidates in the pilot's order (its ties go to the earlier)."""
    rank = {"sync": 0, "async": 1, "hybrid": 100, "async+staleness.momentum_correction=true": 101,
            "auto+policy.auto_rule=18": 102}
    return sorted(policies, key=lambda p: rank.get(p, int(p.split(":")[-1]) if ":" in p else 50))


def constant_k(p):
    """The constant K a candidate runs (constant_k in src/hsgd/runtime/pilot.cc;
    sync's, the workers, is above every kasync:K candidate's)."""
    if p == "sync":
        return math.inf
    if p == "async":
        return 1
    return int(p.split(":")[1]) if p.startswith("kasync:") else None


def choose(ks, score, margin):
    """pilot_choice (src/hsgd/runtime/pilot.cc): the best figure (ties: the
    earlier candidate); with a margin and a constant-K candidate best among
    those with one, the largest K within the margin of it."""
    ks = [p for p in ks if math.isfinite(score[p])]
    if not ks:
        return "sync"  # every candidate stopped within its pilot
    top = max(ks, key=lambda p: score[p])
    with_k = [p for p in ks if constant_k(p) is not None]
    if margin <= 0 or not with_k or top != max(with_k, key=lambda p: score[p]):
        return top
    # exactly the margin below the best counts as within, as in hsgd (kTie)
    near = [p for p in with_k if score[p] >= score[top] - margin - 1e-9]
    return max(near, key=lambda p: constant_k(p))


def survivors(ks, score, keep):
    """pilot_survivors (src/hsgd/runtime/pilot.cc): the best `keep` by the
    first round's figure (ties: the earlier; none that stopped), in
    candidate order."""
    fin = [p for p in ks if math.isfinite(score[p])]
    best = sorted(fin, key=lambda p: (-score[p], ks.index(p)))[:keep]
    return [p for p in ks if p in best]


def pick(ks, rows, frac, a, total):
    """The candidate the pilot chooses for one seed: `rows[p]` is candidate
    p's run; with --keep m > 0, the best m of the first round continue to
    twice the share (at most the whole) and the choice is among them."""
    score = {p: forecast(rows[p], frac, a.forecast, a.window, total) for p in ks}
    if a.keep > 0 and frac < 1:
        ks = survivors(ks, score, a.keep)
        second = min(1.0, 2 * frac)
        score = {p: forecast(rows[p], second, a.forecast, a.window, total) for p in ks}
    return choose(ks, score, a.margin)


def pilot_cost(frac, n, keep):
    """The pilot's extra cost in runs: n candidates to frac, then (with a
    keep) the best `keep` on to twice frac (at most the whole)."""
    return frac * n + (min(keep, n) * (min(1.0, 2 * frac) - frac) if keep > 0 else 0)


def budget(cdir, policies, sid):
    """A seed's budget in seconds: train.budget of its runs' config.toml, or
    (an epoch budget) the end of its longest run. A run that diverged ends
    before it, and its pilot is its beginning up to the budget's share."""
    with open(os.path.join(cdir, sanitize(policies[0]), f"seed-{sid}", "config.toml"), "rb") as f:
        b = tomllib.load(f).get("train", {}).get("budget", 0)
    if b > 0:
        return float(b)
    return max(read_rows(os.path.join(cdir, sanitize(p), f"seed-{sid}", "metrics.csv"))[-1][0]
               for p in policies)


def read_rows(path):
    with open(path) as f:
        return [(float(r["time_s"]), float(r["test_acc"])) for r in csv.DictReader(f)]


def prefix_mean(rows, end):
    """Interval mean (trapezoid over the rows, as hsgd's) of test_acc over
    [0, end] and its area."""
    area, span = 0.0, 0.0
    for (t0, a0), (t1, a1) in zip(rows, rows[1:]):
        if t0 >= end - 1e-9:
            break
        if t1 > end:  # the row that crosses the end, cut there
            a1 = a0 + (a1 - a0) * (end - t0) / (t1 - t0)
            t1 = end
        area += 0.5 * (a0 + a1) * (t1 - t0)
        span += t1 - t0
    return (area / span if span > 0 else float("nan")), area


def forecast(rows, frac, how, window, total):
    """The figure that ranks a candidate whose run has `rows`, for a pilot of
    the share `frac` of the budget `total` (seconds). NaN when the run
    stopped (diverged) within the pilot, its end included: the pilot never
    chooses it."""
    end = total * frac
    if rows[-1][0] < total - 1e-9 and rows[-1][0] <= end + 1e-9:  # stopped by the pilot's end
        return math.nan
    mean, area = prefix_mean(rows, end)
    if how == "mean":
        if window >= 1:
            return mean
        # the last `window` of the pilot, as policy.auto_pilot_window ranks
        start = end * (1 - window)
        return (area - prefix_mean(rows, start)[1]) / (end - start)
    seen = [(t, a) for t, a in rows if 0 < t <= end + 1e-9]
    if how == "last":
        return seen[-1][1] if seen else rows[0][1]
    if frac >= 1 or len(seen) < 3:
        return mean
    xs = [math.log(t) for t, _ in seen]
    ys = [a for _, a in seen]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    a = my - b * mx
    # integral of a + b ln t from end to total, the fit clamped to [0, 1]
    # (numerically: 200 steps)
    n, rest = 200, 0.0
    for i in range(n):
        t = end + (total - end) * (i + 0.5) / n
        rest += min(1.0, max(0.0, a + b * math.log(t))) * (total - end) / n
    return (area + rest) / total


def sanitize(name):
    """A cell's or policy's directory name, as hsgd sweep makes it (sanitize()
    in src/hsgd/cli/sweep.cc: these characters become '-')."""
    return re.sub(r"[:=/ \"',]", "-", name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--forecast", choices=["mean", "last", "logfit"], default="mean")
    ap.add_argument("--window", type=float, default=1.0,
                    help="with --forecast mean: rank by the last share of the pilot "
                    "(policy.auto_pilot_window)")
    ap.add_argument("--margin", type=float, default=0.0,
                    help="policy.auto_pilot_margin: among the constant-K candidates within "
                    "this (test accuracy) of the best K's figure, the largest K")
    ap.add_argument("--keep", type=int, default=0,
                    help="policy.auto_pilot_keep: the best this many of the first round continue "
                    "to twice the share, and the choice is among them (0: one round)")
    ap.add_argument("--candidates", choices=["k", "k+hybrid", "k+rule"], default="k",
                    help="the pilot's candidate set (policy.auto_candidates)")
    ap.add_argument("--committed", action="store_true",
                    help="score against docs/results/sweep/FAMILY/sweep.json")
    ap.add_argument("--same-seed", action="store_true",
                    help="each seed's pilot chooses that seed's run (auto's policy.auto_pilot)")
    ap.add_argument("--product", help="with --same-seed: DIR/FAMILY/sweep.json of the "
                    "auto+policy.auto_pilot=F sweeps")
    a = ap.parse_args()
    if a.same_seed:
        return same_seed(a)
    folds = {f: [] for f in FRACTIONS}
    auto_folds = {}
    runs_per_pilot = []
    cells = 0
    for out in a.runs:
        for _, sweep, cell, cdir, ref in cells_of(out, a.committed):
            seeds = {p: v["interval_mean"]["seeds"] for p, v in ref["policies"].items()
                     if not p.startswith("auto")}
            autos = {p: v["interval_mean"]["seeds"] for p, v in ref["policies"].items()
                     if p.startswith("auto")}
            ks = pilot_order(p for p in cell["policies"] if candidate_of(a.candidates)(p))
            seed_ids = sweep["seeds"]
            cells += 1
            runs_per_pilot.append(len(ks))
            curves = {(p, sid): read_rows(os.path.join(cdir, sanitize(p), f"seed-{sid}",
                                                       "metrics.csv"))
                      for p in ks for sid in seed_ids}
            budgets = {sid: budget(cdir, ks, sid) for sid in seed_ids}
            for held, sid in enumerate(seed_ids):
                def rest(p):
                    return (sum(x for i, x in enumerate(seeds[p]) if i != held)
                            / (len(seed_ids) - 1))
                best_rest = max(rest(p) for p in seeds)
                for p, v in autos.items():  # the auto rules the sweep ran, on the same folds
                    auto_folds.setdefault(p, []).append(
                        (sum(x for i, x in enumerate(v) if i != held) / (len(seed_ids) - 1)
                         - best_rest) * 100)
                for frac in FRACTIONS:
                    chosen = pick(ks, {p: curves[(p, sid)] for p in ks}, frac, a, budgets[sid])
                    folds[frac].append((rest(chosen) - best_rest) * 100)
    print(f"{cells} cells, {len(folds[1.0])} folds (the K chosen on one seed, scored on the "
          f"other two against their best fixed policy); {min(runs_per_pilot)} to "
          f"{max(runs_per_pilot)} K policies per cell; forecast: {a.forecast}\n")
    print("| pilot (fraction of the budget) | pilot cost (runs) | within 1.5 pp | worst | mean |")
    print("|---:|---:|---:|---:|---:|")
    for frac, g in folds.items():
        cost = sum(pilot_cost(frac, n, a.keep) for n in runs_per_pilot) / len(runs_per_pilot)
        print(f"| {frac:g} | {cost:.2f} | {sum(x >= -1.5 for x in g)} of {len(g)} "
              f"({100 * sum(x >= -1.5 for x in g) / len(g):.0f} %) | {min(g):+.2f} | "
              f"{sum(g) / len(g):+.2f} |")
    for p, g in sorted(auto_folds.items()):
        print(f"| {p} (no pilot) | 0 | {sum(x >= -1.5 for x in g)} of {len(g)} "
              f"({100 * sum(x >= -1.5 for x in g) / len(g):.0f} %) | {min(g):+.2f} | "
              f"{sum(g) / len(g):+.2f} |")


def cells_of(out, committed):
    """(family, cell, its directory, the scored cell) of a sweep's output."""
    with open(os.path.join(out, "sweep.json")) as f:
        sweep = json.load(f)
    scored = sweep
    family = os.path.basename(os.path.normpath(out))
    if committed:
        with open(os.path.join(ROOT, "docs", "results", "sweep", family, "sweep.json")) as f:
            scored = json.load(f)
    by_at = {json.dumps(c["at"], sort_keys=True): c for c in scored["cells"]}
    axes = [ax["key"] for ax in sweep["axes"]]
    for cell in sweep["cells"]:
        name = "_".join(f"{k}-{cell['at'][k]}" for k in axes) or "all"
        cdir = os.path.join(out, "cells", sanitize(name))
        if not os.path.isdir(cdir):
            sys.exit(f"{cdir}: not found (is {out} the sweep's output directory?)")
        yield family, sweep, cell, cdir, by_at[json.dumps(cell["at"], sort_keys=True)]


def score_line(name, cost, g, over_async=None, where=None):
    """A table row: cells within 1.5 pp, within 3, worst, mean; with
    over_async (each cell's lead over async, pp) and where (the cells where
    the best fixed policy leads async by 2 pp or more), issue 32's third
    target: ahead of async by 2 pp or more in those cells."""
    ahead = ""
    if over_async is not None:
        ahead = (f" {sum(w and x >= 2 for x, w in zip(over_async, where))} of "
                 f"{sum(where)} |")
    return (f"| {name} | {cost} | {sum(x >= -1.5 for x in g)} of {len(g)} "
            f"({100 * sum(x >= -1.5 for x in g) / len(g):.0f} %) | "
            f"{sum(x >= -3 for x in g)} | {min(g):+.2f} | {sum(g) / len(g):+.2f} |{ahead}")


def same_seed(a):
    cells = {f: [] for f in FRACTIONS}
    over = {f: [] for f in FRACTIONS}  # each cell's lead over async (pp)
    where = []  # the cells where a fixed policy leads async by 2 pp or more
    autos, product, agree, product_frac, mean_k = {}, [], [0, 0], None, []
    chose = [0]  # seeds whose product run chose the predicted candidate
    autos_over, product_over = {}, []
    autos_mean, picked_mean = {}, {f: [] for f in FRACTIONS}  # per cell, for "behind auto"
    for out in a.runs:
        for family, sweep, cell, cdir, ref in cells_of(out, a.committed):
            every = {p: v["interval_mean"]["seeds"] for p, v in ref["policies"].items()}
            fixed = {p: v for p, v in every.items() if not p.startswith("auto")}
            best = max(sum(v) / len(v) for v in fixed.values())
            asy = sum(fixed["async"]) / len(fixed["async"])
            where.append((best - asy) * 100 >= 2)
            ks = pilot_order(p for p in cell["policies"] if candidate_of(a.candidates)(p))
            mean_k.append(len(ks))
            seed_ids = sweep["seeds"]
            for p, v in ref["policies"].items():
                if p.startswith("auto"):
                    v = v["interval_mean"]["seeds"]
                    autos.setdefault(p, []).append((sum(v) / len(v) - best) * 100)
                    autos_over.setdefault(p, []).append((sum(v) / len(v) - asy) * 100)
                    autos_mean.setdefault(p, []).append(sum(v) / len(v))
            curves = {(p, sid): read_rows(os.path.join(cdir, sanitize(p), f"seed-{sid}",
                                                       "metrics.csv"))
                      for p in ks for sid in seed_ids}
            budgets = {sid: budget(cdir, ks, sid) for sid in seed_ids}
            picks = {}
            for frac in FRACTIONS:
                got = []
                for i, sid in enumerate(seed_ids):
                    chosen = pick(ks, {p: curves[(p, sid)] for p in ks}, frac, a, budgets[sid])
                    picks[(frac, i)] = chosen
                    got.append(every[chosen][i])
                cells[frac].append((sum(got) / len(got) - best) * 100)
                over[frac].append((sum(got) / len(got) - asy) * 100)
                picked_mean[frac].append(sum(got) / len(got))
            if a.product:
                with open(os.path.join(a.product, family, "sweep.json")) as f:
                    prod = json.load(f)
                pc = next(c for c in prod["cells"] if c["at"] == cell["at"])
                (pname, pv), = pc["policies"].items()
                product_frac = float(pname.split("auto_pilot=")[1])
                vals = pv["interval_mean"]["seeds"]
                pdir = os.path.join(a.product, family, "cells", os.path.basename(cdir),
                                    sanitize(pname))
                product.append((sum(vals) / len(vals) - best) * 100)
                product_over.append((sum(vals) / len(vals) - asy) * 100)
                for i, sid in enumerate(seed_ids):
                    predicted = picks[(product_frac, i)]
                    agree[0] += abs(every[predicted][i] - vals[i]) < 1e-9
                    agree[1] += 1
                    with open(os.path.join(pdir, f"seed-{sid}", "summary.json")) as f:
                        chosen = json.load(f)["auto_pilot"]["chosen"]
                    chose[0] += RULE.get(chosen, chosen) == predicted
    n = len(cells[1.0])
    print(f"{n} cells, each seed's pilot choosing that seed's run, scored per cell (the mean "
          f"over the seeds) against the best fixed policy; forecast: {a.forecast}\n")
    print(f"candidates: {a.candidates}; ranked over the pilot's last {a.window:g}; "
          f"margin {a.margin:g}\n")
    print("| pilot (fraction of the budget) | pilot cost (runs) | within 1.5 pp | within 3 pp "
          "| worst | mean | ahead of async by 2 pp where a fixed policy is |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for frac, g in cells.items():
        cost = sum(pilot_cost(frac, n, a.keep) for n in mean_k) / len(mean_k)
        print(score_line(f"{frac:g}", f"{cost:.2f}", g, over[frac], where))
    if product:
        print(score_line(f"auto, policy.auto_pilot = {product_frac:g} (the runs)",
                         f"{sum(pilot_cost(product_frac, n, a.keep) for n in mean_k) / len(mean_k):.2f}",
                         product, product_over, where))
    for p, g in sorted(autos.items()):
        print(score_line(f"{p} (no pilot)", "0", g, autos_over[p], where))
    for p, means in sorted(autos_mean.items()):  # the committed MLP grid's target
        gaps = [(x - m) * 100 for x, m in zip(picked_mean[0.1], means)]
        print(f"\nAt 0.1: {sum(g < -0.5 for g in gaps)} of {len(gaps)} cells more than 0.5 pp "
              f"behind {p} (worst {min(gaps):+.2f}, mean {sum(gaps) / len(gaps):+.2f}).")
    if product:
        print(f"\nThe product chose the predicted candidate in {chose[0]} of {agree[1]} seeds; "
              f"its runs score as the predicted ones in {agree[0]}.")


if __name__ == "__main__":
    main()
