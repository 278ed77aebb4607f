#!/usr/bin/env python3
"""auto's constants at half and at twice their value (issue 32: "each constant
has a stated meaning and a sensitivity figure").

For each constant of the rule (policy/auto_policy.h, AutoConstants) and each
factor (0.5, 2), runs `auto` alone on the families' sweeps with
policy.auto_constants = "NAME=VALUE" added to their [set], and compares
every cell's interval-mean accuracy with the family's whole sweep run by the
same binary first (every fixed policy and today's auto, unchanged): the best
fixed policy there, and today's auto there. It also says how far that
baseline is from the committed one (docs/results/sweep/FAMILY/sweep.json).

Usage:
  scripts/auto-sensitivity.py --hsgd build/release/hsgd --out runs/sensitivity \
      [--families heldout-data,heldout-issue] [--constants budget,rise_sigmas] \
      [--rule 18] [--jobs 2] [--report] [--cells]
--rule names the auto rule measured (policy.auto_rule; default 18, today's):
its runs name it, and its column in the family's sweep is the baseline.
A family is a sweep file's path under examples/sweep/ without ".toml"
(random/random-2028-01 for a random draw); its committed sweep is
docs/results/sweep/NAME/, NAME the file's name.
--report only reads what --out already holds and prints the tables.
Reads the family sweep files from examples/sweep/FAMILY.toml."""
import argparse
import json
import os
import subprocess
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweepfiles import one_policy_sweep  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# AutoConstants, in its order, with the rule's values (a test,
# AutoPolicy.TheSensitivityScriptListsTheRulesConstantsAndDefault, holds it
# to the C++ list and DEFAULT_RULE to the default); integers halve to
# their floor (at least 1) and double exactly.
CONSTANTS = [
    ("min_window", 8, True), ("rise_sigmas", 2.5, False), ("rise_windows", 2, True),
    ("blow_up", 0.1, False), ("probe_sigmas", 1.0, False), ("gap_min", 2, True),
    ("gap_max", 16, True), ("cap_factor", 1.5, False), ("spike", 0.5, False),
    ("spike_sds", 4.0, False), ("spike_pushes", 2, True), ("spike_factor", 4, True),
    ("accel_sigmas", 1.0, False), ("fall_sigmas", 2.0, False), ("budget", 0.5, False),
    ("retry_blocks", 16, True), ("switch_k", 2, True), ("batch_ref", 32, False),
]
FACTORS = [0.5, 2.0]
DEFAULT_RULE = 18  # policy.auto_rule's default (config/keys.cc)


def value(default, integer, factor):
    if integer:
        return max(1, int(default * factor))
    return default * factor


def fmt_value(v):
    return ("%g" % v)


def write_sweep(family, constants, path, rule):
    """The family's sweep with auto alone under rule `rule` and `constants`
    ("" = the rule's)."""
    extra = {"policy.auto_rule": rule}
    if constants:
        extra["policy.auto_constants"] = constants
    # A family that names another rule's auto runs `rule` here.
    one_policy_sweep(os.path.join(ROOT, "examples", "sweep", family + ".toml"), "auto", path,
                     extra, drop=("policy.auto_rule",))


def cell_key(c):
    return tuple(sorted(c["at"].items()))


def auto_means(path):
    with open(path) as f:
        cells = json.load(f)["cells"]
    return {cell_key(c): c["policies"]["auto"]["interval_mean"] for c in cells}


def baseline(path, candidate="auto"):
    """Per cell: the best fixed policy and `candidate`, today's auto in the
    family's sweep (the sweep's "auto" unless the family names the rule)."""
    with open(path) as f:
        cells = json.load(f)["cells"]
    out = {}
    for c in cells:
        pol = c["policies"]
        fixed = {k: v["interval_mean"]["mean"] for k, v in pol.items()
                 if not k.startswith("auto")}
        best = max(fixed, key=fixed.get)
        out[cell_key(c)] = dict(best=best, best_mean=fixed[best],
                                auto=pol[candidate]["interval_mean"])
    return out


def todays_auto(family, rule):
    """The policy of a family's sweep that is auto under rule `rule`: the one
    naming it, or "auto" where the family's [set] names that rule or (for
    DEFAULT_RULE, today's default) names none."""
    with open(os.path.join(ROOT, "examples", "sweep", family + ".toml"), "rb") as f:
        s = tomllib.load(f)
    named = f"auto+policy.auto_rule={rule}"
    if named in s["policies"]:
        return named
    if "auto" in s["policies"]:
        given = s.get("set", {}).get("policy", {}).get("auto_rule")
        if given == rule or (given is None and rule == DEFAULT_RULE):
            return "auto"
    sys.exit(f"auto-sensitivity.py: {family}: no policy in its sweep is auto with rule {rule}")


def run(hsgd, family, constants, out, jobs, rule, whole=False):
    d = os.path.join(out, family, "baseline" if whole else constants.replace("=", "-"))
    result = os.path.join(d, "sweep.json")
    if os.path.exists(result):
        return result
    os.makedirs(d, exist_ok=True)
    if whole:  # the family's own sweep, every policy
        spec = os.path.join(ROOT, "examples", "sweep", family + ".toml")
    else:
        spec = os.path.join(d, "sweep.toml")
        write_sweep(family, constants, spec, rule)
    r = subprocess.run([hsgd, "sweep", spec, "--out", os.path.join(d, "runs"),
                        "--jobs", str(jobs)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{family} {constants or 'rule'}: hsgd sweep failed ({r.returncode}):\n"
                 f"{r.stderr.strip()}")
    os.replace(os.path.join(d, "runs", "sweep.json"), result)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hsgd", default=os.path.join(ROOT, "build", "release", "hsgd"))
    ap.add_argument("--out", default="runs/sensitivity")
    ap.add_argument("--families", default="heldout-data,heldout-issue")
    ap.add_argument("--constants", default=",".join(c[0] for c in CONSTANTS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rule", type=int, default=DEFAULT_RULE)
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--cells", action="store_true",
                    help="also a table of the cells some value moves (auto - best fixed, pp)")
    a = ap.parse_args()
    families = a.families.split(",")
    wanted = a.constants.split(",")
    unknown = [w for w in wanted if w not in [c[0] for c in CONSTANTS]]
    if unknown:
        sys.exit(f"--constants: unknown {', '.join(unknown)}")

    base = {}
    for f in families:
        p = os.path.join(a.out, f, "baseline", "sweep.json")
        if not a.report:
            p = run(a.hsgd, f, "", a.out, a.jobs, a.rule, whole=True)
        if not os.path.exists(p):
            sys.exit(f"{f}: no baseline in {p}; run without --report first")
        base[f] = baseline(p, todays_auto(f, a.rule))
        committed = os.path.join(ROOT, "docs", "results", "sweep", os.path.basename(f),
                                 "sweep.json")
        if not os.path.exists(committed):
            continue
        ref = baseline(committed, todays_auto(f, a.rule))
        diff = max(abs(base[f][k]["auto"]["mean"] - ref[k]["auto"]["mean"]) for k in ref)
        diff_best = max(abs(base[f][k]["best_mean"] - ref[k]["best_mean"]) for k in ref)
        print(f"{f}: this binary's baseline against the committed sweep: today's auto within "
              f"{100 * diff:.4f} pp, the best fixed policy within {100 * diff_best:.4f} pp")
    print()

    print("| constant | rule | value | cells within 1.5 pp of best fixed | worst vs best (pp) "
          "| mean vs today's auto (pp) | worst vs today's auto (pp) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    per_cell = {}  # (family, cell): {constants: auto - best (pp)}
    variants = []
    for name, default, integer in CONSTANTS:
        if name not in wanted:
            continue
        for factor in FACTORS:
            v = value(default, integer, factor)
            constants = f"{name}={fmt_value(v)}"
            variants.append(constants)
            diffs_best, diffs_auto = [], []
            for f in families:
                d = os.path.join(a.out, f, constants.replace("=", "-"), "sweep.json")
                if not a.report:
                    d = run(a.hsgd, f, constants, a.out, a.jobs, a.rule)
                if not os.path.exists(d):
                    continue
                got = auto_means(d)
                for k, ref in base[f].items():
                    m = got[k]["mean"]
                    diffs_best.append(100 * (m - ref["best_mean"]))
                    diffs_auto.append(100 * (m - ref["auto"]["mean"]))
                    per_cell.setdefault((f, k), {})[constants] = 100 * (m - ref["best_mean"])
            if not diffs_best:
                print(f"| {name} | {fmt_value(default)} | {fmt_value(v)} | not run | | | |")
                continue
            within = sum(x >= -1.5 for x in diffs_best)
            print(f"| {name} | {fmt_value(default)} | {fmt_value(v)} | {within} of "
                  f"{len(diffs_best)} | {min(diffs_best):+.2f} | "
                  f"{sum(diffs_auto) / len(diffs_auto):+.2f} | {min(diffs_auto):+.2f} |")
            sys.stdout.flush()
    # Today's rule on the same cells, for reference.
    db = [100 * (r["auto"]["mean"] - r["best_mean"]) for f in families for r in base[f].values()]
    if db:
        print(f"\nToday's rule on these {len(db)} cells: {sum(x >= -1.5 for x in db)} within "
              f"1.5 pp of the best fixed policy, worst {min(db):+.2f} pp.")
    if a.cells and per_cell:
        print("\n| family, cell | best fixed | best (%) | today | "
              + " | ".join(v.replace("=", " ") for v in variants) + " |")
        print("|---|---|---:|---:|" + "---:|" * len(variants))
        still = 0
        for (f, k), got in per_cell.items():
            ref = base[f][k]
            today = 100 * (ref["auto"]["mean"] - ref["best_mean"])
            if all(abs(got.get(v, today) - today) < 0.005 for v in variants):
                still += 1
                continue
            cell = ", ".join(f"{key} {val}" for key, val in k)
            print(f"| {os.path.basename(f)} {cell} | {ref['best']} | {100 * ref['best_mean']:.2f} "
                  f"| {today:+.2f} | "
                  + " | ".join(f"{got[v]:+.2f}" if v in got else "" for v in variants) + " |")
        print(f"\n{still} of the {len(per_cell)} cells: every value gives today's result.")


if __name__ == "__main__":
    main()
