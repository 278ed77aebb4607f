#!/usr/bin/env python3
"""auto on the held-out families of issue 32 (examples/sweep/heldout-*.toml),
against the best fixed policy of each cell, with the issue's targets:
within 1.5 pp of the best fixed policy (interval mean) in at least 90 % of
cells, never more than 3 pp behind, and ahead of async by 2 pp or more
wherever a fixed policy is.
Usage: scripts/auto-heldout.py [OUT] (OUT = runs/heldout, holding the sweep
directories heldout-data, heldout-shape, heldout-model, heldout-issue). Reads sweep.json
files only; runs nothing; a family not run is skipped."""
import json
import os
import sys

D = sys.argv[1] if len(sys.argv) > 1 else "runs/heldout"
FAMILIES = [("heldout-data", "other data"), ("heldout-shape", "other cluster shape"),
            ("heldout-model", "other model"), ("heldout-issue", "the issue's setting")]
CANDIDATE = "auto"


def pp(x):
    return 100.0 * x


def fmt(x):
    return ("%+.2f" % x).replace("-", "−")


rows = []
print("| family | cell | best fixed | best fixed interval (%) | auto interval (%) "
      "| auto − best (pp) | auto − async (pp) | best − async (pp) | auto − best, final (pp) |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
for name, label in FAMILIES:
    p = os.path.join(D, name, "sweep.json")
    if not os.path.exists(p):
        print(f"| {label} | not run | | | | | | | |")
        continue
    with open(p) as f:
        cells = json.load(f)["cells"]
    for c in cells:
        pol = c["policies"]
        fixed = {k: v for k, v in pol.items() if k != CANDIDATE}
        best = max(fixed, key=lambda k: fixed[k]["interval_mean"]["mean"])
        bi = fixed[best]["interval_mean"]["mean"]
        a = pol[CANDIDATE]
        ai = a["interval_mean"]["mean"]
        asy = pol["async"]["interval_mean"]["mean"]
        r = dict(db=pp(ai - bi), da=pp(ai - asy), ba=pp(bi - asy),
                 dbf=pp(a["final"]["mean"] - fixed[best]["final"]["mean"]))
        rows.append(r)
        cell = ", ".join(f"{k} = {v}" for k, v in c["at"].items())
        print(f"| {label} | {cell} | {best} | {pp(bi):.2f} | {pp(ai):.2f} | {fmt(r['db'])} "
              f"| {fmt(r['da'])} | {fmt(r['ba'])} | {fmt(r['dbf'])} |")
print()
if rows:
    within = sum(r["db"] >= -1.5 for r in rows)
    worst = min(r["db"] for r in rows)
    strong = [r for r in rows if r["ba"] >= 2.0]
    met = [r for r in strong if r["da"] >= 2.0]
    print(f"- within 1.5 pp of the best fixed policy: {within} of {len(rows)} cells "
          f"({100.0 * within / len(rows):.0f} %; target >= 90 %)")
    print(f"- worst: {fmt(worst)} pp (target: never more than 3 pp behind)")
    print(f"- cells where a fixed policy beats async by >= 2 pp: {len(strong)}; "
          f"auto beats async by >= 2 pp in {len(met)} of them")
