#!/usr/bin/env python3
"""The issue-17 grids at full size (scripts/sweep.sh full): auto (fourth rule)
and the third rule (auto without its staleness budget) against the best fixed
policy, per cell, with the targets at a glance (docs/results-auto.md).
Usage: scripts/auto-full.py [OUT] (OUT = runs/sweep-full: the directories
sweep-mlp, sweep-mlp-third, sweep-lenet5, sweep-lenet5-third).  Reads
sweep.json files only; runs nothing.  A grid not (fully) run is skipped."""
import json, os, sys

D = sys.argv[1] if len(sys.argv) > 1 else "runs/sweep-full"
THIRD = "auto+policy.auto_ablate=budget"
# The cells the fourth rule (the staleness budget) was designed on: batch 32
# (every lr and sigma), but on seeds 11 and 12; the sweeps here run seeds 1-3.
DESIGN_BATCH = "32"


def load(name):
    p = os.path.join(D, name, "sweep.json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)["cells"]


def key(at):
    return tuple(sorted(at.items()))


def fmt(x, bold_below=None):
    s = ("%+.2f" % x).replace("-", "−")
    return f"**{s}**" if bold_below is not None and x < bold_below else s


def table(fixed_name, third_name, tol, label):
    cells = load(fixed_name)
    if cells is None:
        print(f"{label}: {fixed_name}/sweep.json not found\n")
        return
    third = {key(c["at"]): c["policies"][THIRD] for c in (load(third_name) or [])}
    pp = lambda x: 100.0 * x
    axes = list(cells[0]["at"].keys())
    short = {"optim.lr": "lr", "stragglers.sigma": "σ", "train.batch": "batch"}
    head = [short.get(a, a) for a in axes]
    print(f"### {label}\n")
    print("| " + " | ".join(head) + " | kind | best fixed | best fixed interval | auto interval "
          "| auto − best (pp) | auto − async (pp) | best − async (pp) | auto − best, final (pp) "
          "| third rule − best (pp) | third rule − async (pp) |")
    print("|" + "---:|" * len(head) + "---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for c in cells:
        pol = c["policies"]
        best = c["best_fixed"]
        bi, bf = pol[best]["interval_mean"]["mean"], pol[best]["final"]["mean"]
        a = pol["auto"]
        ai, af = a["interval_mean"]["mean"], a["final"]["mean"]
        asi = pol["async"]["interval_mean"]["mean"]
        t = third.get(key(c["at"]))
        ti = t["interval_mean"]["mean"] if t else None
        kind = "design" if c["at"].get("train.batch") == DESIGN_BATCH else "held out"
        if "train.batch" not in c["at"]:
            kind = "held out"
        r = dict(at=c["at"], kind=kind, best=best, bi=pp(bi), ai=pp(ai), db=pp(ai - bi),
                 da=pp(ai - asi), ba=pp(bi - asi), dbf=pp(af - bf),
                 tb=None if ti is None else pp(ti - bi), ta=None if ti is None else pp(ti - asi))
        rows.append(r)
        vals = [c["at"][x] for x in axes]
        tb = "n/a" if r["tb"] is None else fmt(r["tb"], -tol)
        ta = "n/a" if r["ta"] is None else fmt(r["ta"])
        print("| " + " | ".join(vals) + f" | {kind} | {best} | {r['bi']:.2f} | {r['ai']:.2f} | "
              f"{fmt(r['db'], -tol)} | {fmt(r['da'])} | {fmt(r['ba'])} | {fmt(r['dbf'])} | {tb} | {ta} |")
    print()
    for who, kb in [("auto", "db"), ("third rule", "tb")]:
        rs = [r for r in rows if r[kb] is not None]
        if not rs:
            continue
        for kind in ["design", "held out", "all"]:
            sub = [r for r in rs if kind == "all" or r["kind"] == kind]
            if not sub:
                continue
            v = [r[kb] for r in sub]
            print(f"- {who}, {kind} cells: within {tol:g} pp of the best fixed policy in "
                  f"{sum(x >= -tol for x in v)} of {len(v)}; mean {fmt(sum(v) / len(v))}, "
                  f"worst {fmt(min(v))}")
        ka = "da" if kb == "db" else "ta"
        strong = [r for r in rs if r["ba"] >= 2.0]
        met = [r for r in strong if r[ka] >= 2.0]
        print(f"- {who}: cells where a fixed policy beats async by ≥ 2 pp: {len(strong)}; "
              f"{who} beats async by ≥ 2 pp in {len(met)} of them"
              + ("" if len(met) == len(strong) else "; missed: " + ", ".join(
                  "/".join(r["at"][x] for x in axes) + f" ({fmt(r[ka])})"
                  for r in strong if r not in met)))
    print()


table("sweep-mlp", "sweep-mlp-third", 1.0, "MLP grid (27 cells, 3 seeds, 100 virtual s)")
table("sweep-lenet5", "sweep-lenet5-third", 1.5, "LeNet-5 slice (4 cells, 100 virtual s)")
