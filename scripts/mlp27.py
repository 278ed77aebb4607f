#!/usr/bin/env python3
"""Combine the committed MLP sweeps into the 27-cell table of docs/results-auto.md
("All 27 cells", issue 17): auto (third rule) - best fixed and auto - async,
interval mean and final, per cell.  Usage: scripts/mlp27.py [DIR]
(DIR = docs/results/sweep).  Reads sweep.json files only; runs nothing."""
import json, os, sys

D = sys.argv[1] if len(sys.argv) > 1 else "docs/results/sweep"


def load(name):
    with open(os.path.join(D, name, "sweep.json")) as f:
        return json.load(f)["cells"]


def key(at, fixed):
    at = dict(fixed, **at)
    return (float(at["optim.lr"]), float(at["stragglers.sigma"]), int(at["train.batch"]))


cells = {}  # (lr, sigma, batch) -> (fixed policies dict, auto dict, source, seeds)
# Reduced grid: fixed policies from sweep-mlp-reduced, auto from rerun-auto-mlp-reduced.
for fixed_dir, auto_dir, extra, src in [
        ("sweep-mlp-reduced", "rerun-auto-mlp-reduced", {"train.batch": "32"}, "reduced"),
        ("sweep-mlp-batch", "rerun-auto-mlp-batch", {"stragglers.sigma": "0.25"}, "batch")]:
    fx = {key(c["at"], extra): c["policies"] for c in load(fixed_dir)}
    bestof = {key(c["at"], extra): c["best_fixed"] for c in load(fixed_dir)}
    au = {key(c["at"], extra): c["policies"]["auto"] for c in load(auto_dir)}
    for k, pol in fx.items():
        pol = {p: v for p, v in pol.items() if p != "auto"}
        cells[k] = (pol, au[k], src, bestof[k])
for name, extra in [("sweep-mlp-rest", {}), ("sweep-mlp-rest-s025", {"stragglers.sigma": "0.25"})]:
    for c in load(name):
        pol = dict(c["policies"])
        a = pol.pop("auto")
        cells[key(c["at"], extra)] = (pol, a, "rest", c["best_fixed"])

assert len(cells) == 27, len(cells)
pp = lambda x: 100.0 * x
rows, within, strong, strong_met = [], 0, 0, []
for k in sorted(cells):
    pol, a, src, best = cells[k]  # best fixed as the sweep chose it (first listed on a tie)
    assert pol[best]["interval_mean"]["mean"] == max(v["interval_mean"]["mean"] for v in pol.values())
    bi, bf = pol[best]["interval_mean"]["mean"], pol[best]["final"]["mean"]
    ai, af = a["interval_mean"]["mean"], a["final"]["mean"]
    asi, asf = pol["async"]["interval_mean"]["mean"], pol["async"]["final"]["mean"]
    d_best, d_async, b_async = pp(ai - bi), pp(ai - asi), pp(bi - asi)
    if d_best >= -1.0:
        within += 1
    if b_async >= 2.0:
        strong += 1
        strong_met.append((k, d_async >= 2.0))
    seeds = len(a["interval_mean"]["seeds"])
    rows.append((k, src, seeds, best, pp(bi), pp(ai), d_best, d_async, b_async,
                 pp(af - bf), pp(af - asf)))

print("| lr | σ | batch | source | seeds | best fixed | best fixed interval | auto interval "
      "| auto − best (pp) | auto − async (pp) | best − async (pp) | auto − best, final (pp) "
      "| auto − async, final (pp) |")
print("|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for (lr, s, b), src, n, best, bi, ai, db, da, ba, dbf, daf in rows:
    f = lambda x: ("**%+.2f**" % x if x < -1.0 else "%+.2f" % x).replace("-", "−")
    g = lambda x: ("%+.2f" % x).replace("-", "−")
    print(f"| {lr:g} | {s:g} | {b} | {src} | {n} | {best} | {bi:.2f} | {ai:.2f} | {f(db)} | "
          f"{g(da)} | {g(ba)} | {g(dbf)} | {g(daf)} |")
print()
print(f"within 1 pp of the best fixed (interval): {within} of {len(rows)}")
print(f"cells where best fixed - async >= 2 pp: {strong}; auto - async >= 2 pp in "
      f"{sum(m for _, m in strong_met)}: " + ", ".join(f"{k}:{'met' if m else 'MISSED'}" for k, m in strong_met))
by = {}
for r in rows:
    by.setdefault(r[1], []).append(r[6])
for src, v in by.items():
    print(f"{src}: {sum(x >= -1 for x in v)} of {len(v)} within 1 pp; worst {min(v):+.2f}; mean {sum(v)/len(v):+.2f}")
allv = [r[6] for r in rows]
print(f"all: mean auto-best {sum(allv)/len(allv):+.2f}, worst {min(allv):+.2f}")
