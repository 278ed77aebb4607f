#!/usr/bin/env python3
"""Tables (markdown) and plots (gnuplot) for scripts/data-regimes.sh.

Reads the `hsgd compare` outputs under RUNS and writes into DOCS:
  skew-<set>.md/.png      policies under label skew, per alpha
  global-pool.md/.png     global_fraction at alpha 0.1
  importance.md/.png      importance vs uniform sampling: updates/time to target
Usage: data_regimes_report.py RUNS DOCS
"""
import csv
import json
import math
import os
import subprocess
import sys

RUNS, DOCS = sys.argv[1], sys.argv[2]
os.makedirs(DOCS, exist_ok=True)
ALPHAS = ["0.05", "0.1", "0.5", "1", "100"]
HYBRIDS = ["hybrid", "hybrid+policy.schedule=adaptive"]
SHORT = {"hybrid": "hybrid-step", "hybrid+policy.schedule=adaptive": "hybrid-adaptive"}


def load(path):
    with open(path) as f:
        d = json.load(f)
    return {p["policy"]: p for p in d["policies"]}


def skew_of(run_dir):
    """Mean label skew (TV) recorded in round 0 of the first policy."""
    for root, _, files in os.walk(run_dir):
        if "summary.json" in files:
            with open(os.path.join(root, "summary.json")) as f:
                s = json.load(f)
            return s.get("partition", {}).get("skew_tv", float("nan")), s.get(
                "partition", {}).get("effective_skew_tv", float("nan"))
    return float("nan"), float("nan")


def fmt(x, digits=1):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def sweep_table(name, dirs, label, xs, xlabel, logx):
    """dirs: list of (x, compare dir). One row per x."""
    rows, data = [], []
    policies = None
    for x, d in dirs:
        path = os.path.join(d, "compare.json")
        if not os.path.exists(path):
            continue
        p = load(path)
        policies = policies or list(p.keys())
        skew, eff = skew_of(d)
        acc = {k: 100 * v["final_test_acc"]["mean"] for k, v in p.items()}
        # compare.json holds accuracy differences as fractions: x100 for pp.
        diff = {k: (100 * v["diff_test_acc"]["avg"]["mean"],
                    100 * v["diff_test_acc"]["end"]["mean"]) for k, v in p.items()}
        cells = [x, fmt(skew, 3) if not label else f"{fmt(skew, 3)} / {fmt(eff, 3)}"]
        cells += [fmt(acc[k]) for k in policies]
        for h in HYBRIDS:
            if h in diff:
                ha, he = diff[h]
                sa, se = diff.get("sync", (float("nan"), float("nan")))
                cells += [f"{ha:+.1f} / {he:+.1f}", f"{ha - sa:+.1f} / {he - se:+.1f}"]
        rows.append(cells)
        data.append((x, [acc[k] for k in policies]))
    if not rows:
        return
    head = [xlabel, "skew TV" if not label else "skew TV (shard / with pool)"]
    head += [f"{SHORT.get(k, k)} acc %" for k in policies]
    for h in HYBRIDS:
        if h in policies:
            head += [f"{SHORT[h]} − async pp (avg / end)", f"{SHORT[h]} − sync pp (avg / end)"]
    with open(os.path.join(DOCS, name + ".md"), "w") as f:
        f.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
        for r in rows:
            f.write("| " + " | ".join(str(c) for c in r) + " |\n")
    dat = os.path.join(DOCS, name + ".dat")
    with open(dat, "w") as f:
        f.write("# x " + " ".join(SHORT.get(k, k) for k in policies) + "\n")
        for x, accs in data:
            f.write(x + " " + " ".join(f"{a:.3f}" for a in accs) + "\n")
    plots = ", ".join(f"'{dat}' using 1:{i + 2} with linespoints title '{SHORT.get(k, k)}'"
                      for i, k in enumerate(policies))
    gnuplot(f"""set terminal pngcairo size 800,500
set output '{os.path.join(DOCS, name + '.png')}'
{'set logscale x' if logx else ''}
set xlabel '{xlabel}'
set ylabel 'final test accuracy (%)'
set key bottom right
set grid
plot {plots}
""")


def first_reach(rows, key, target, better):
    """Updates and time when `key` first reaches `target`, interpolated
    linearly between the two evaluations around the crossing."""
    prev = None
    for r in rows:
        v = r.get(key)
        if v in (None, "", "nan"):
            continue
        v, u, t = float(v), float(r["updates"]), float(r["time_s"])
        if (v <= target) if better == "lower" else (v >= target):
            if prev is None or prev[0] == v:
                return round(u), t
            f = (target - prev[0]) / (v - prev[0])
            return round(prev[1] + f * (u - prev[1])), prev[2] + f * (t - prev[2])
        prev = (v, u, t)
    return None, None


def overhead_table():
    """Per-batch cost, one worker on threads: the fastest of the repeats."""
    lines = ["| set | sampling ms/batch uniform | gradient ms/batch uniform | "
             "sampling ms/batch loss | gradient ms/batch loss | overhead % per batch |",
             "|---|---|---|---|---|---|"]
    for setname in ("synthetic", "lenet5"):
        best = {}
        for kind in ("uniform", "loss"):
            for rep in (1, 2):
                path = os.path.join(RUNS, f"overhead-{setname}-{kind}-{rep}", "summary.json")
                if not os.path.exists(path):
                    continue
                with open(path) as f:
                    sb = json.load(f).get("sampling", {})
                total = sb.get("sampling_s_per_batch", 0) + sb.get("gradient_s_per_batch", 0)
                if kind not in best or total < best[kind][0]:
                    best[kind] = (total, sb)
        if len(best) < 2:
            continue
        u, l = best["uniform"][1], best["loss"][1]
        lines.append(f"| {setname} | {1e3 * u['sampling_s_per_batch']:.3f} | "
                     f"{1e3 * u['gradient_s_per_batch']:.3f} | {1e3 * l['sampling_s_per_batch']:.3f} | "
                     f"{1e3 * l['gradient_s_per_batch']:.3f} | "
                     f"{100 * (best['loss'][0] / best['uniform'][0] - 1):+.1f} |")
    return "\n".join(lines) + "\n"


def sim_cost_table():
    """Per-batch sampling and gradient time inside the simulator runs (real
    seconds, summed over the simulated workers, one thread)."""
    lines = ["| run | sampling ms/batch | gradient ms/batch | sampling share of the batch % |",
             "|---|---|---|---|"]
    for setname in sorted(os.listdir(RUNS)):
        if not setname.startswith("importance-"):
            continue
        for pol in sorted(os.listdir(os.path.join(RUNS, setname))):
            path = os.path.join(RUNS, setname, pol, "round-0", "summary.json")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                sb = json.load(f).get("sampling", {})
            if not sb:
                continue
            sm, gm = sb["sampling_s_per_batch"], sb["gradient_s_per_batch"]
            lines.append(f"| {setname.replace('importance-', '')} {pol} | {1e3 * sm:.3f} | "
                         f"{1e3 * gm:.3f} | {100 * sm / (sm + gm):.1f} |")
    return "\n".join(lines) + "\n"


def importance_table():
    out = []
    plots = []
    for setname in sorted(os.listdir(RUNS)):
        if not setname.startswith("importance-"):
            continue
        d = os.path.join(RUNS, setname)
        uni_dir = None
        runs = {}
        for pol in sorted(os.listdir(d)):
            rd = os.path.join(d, pol, "round-0")
            if not os.path.exists(os.path.join(rd, "metrics.csv")):
                continue
            with open(os.path.join(rd, "metrics.csv")) as f:
                rows = list(csv.DictReader(f))
            with open(os.path.join(rd, "summary.json")) as f:
                s = json.load(f)
            runs[pol] = (rows, s, rd)
        # Directory names write "=" as "-": async+sampling.kind-loss.
        uniform = [p for p in runs if "sampling.kind" not in p]
        loss = [p for p in runs if "sampling.kind" in p]
        for u in uniform:
            for l in loss:
                if l.split("+")[0] != u.split("+")[0]:
                    continue
                ur, us, _ = runs[u]
                lr, ls, _ = runs[l]
                # Targets: what uniform reaches at half its budget, so both
                # runs have time to get there.
                half = ur[len(ur) // 2]
                t_loss, t_acc = float(half["test_loss"]), float(half["test_acc"])
                uu, ut = first_reach(ur, "test_loss", t_loss, "lower")
                lu, lt = first_reach(lr, "test_loss", t_loss, "lower")
                ua, uat = first_reach(ur, "test_acc", t_acc, "higher")
                la, lat = first_reach(lr, "test_acc", t_acc, "higher")
                ratio = (uu / lu) if uu and lu else None
                out.append([setname.replace("importance-", ""), u.split("+")[0],
                            f"{t_loss:.4f}", str(uu), str(lu) if lu else "not reached",
                            fmt(ratio, 2) if ratio else "n/a",
                            f"{100 * t_acc:.1f}", str(ua), str(la) if la else "not reached",
                            f"{100 * float(ur[-1]['test_acc']):.1f}",
                            f"{100 * float(lr[-1]['test_acc']):.1f}"])
                dat_u = os.path.join(DOCS, f"{setname}-{u}.dat")
                dat_l = os.path.join(DOCS, f"{setname}-{u}-loss.dat")
                for path, rows in ((dat_u, ur), (dat_l, lr)):
                    with open(path, "w") as f:
                        for r in rows:
                            f.write(f"{r['updates']} {r['test_loss']}\n")
                tag = f"{setname.replace('importance-', '')} {u.split('+')[0]}"
                plots.append(f"'{dat_u}' using 1:2 with lines title '{tag} uniform'")
                plots.append(f"'{dat_l}' using 1:2 with lines dashtype 2 title '{tag} loss'")
    if not out:
        return
    head = ["set", "policy", "target test loss", "updates uniform", "updates loss",
            "speed-up (updates)", "target acc %", "updates uniform", "updates loss",
            "final acc uniform %", "final acc loss %"]
    with open(os.path.join(DOCS, "importance.md"), "w") as f:
        f.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
        for r in out:
            f.write("| " + " | ".join(r) + " |\n")
        f.write("\n" + sim_cost_table() + "\n" + overhead_table())
    gnuplot(f"""set terminal pngcairo size 900,500
set output '{os.path.join(DOCS, 'importance.png')}'
set xlabel 'updates'
set ylabel 'test loss'
set key top right
set grid
plot {', '.join(plots)}
""")


for s in ("synthetic", "lenet5"):
    sweep_table(f"skew-{s}", [(a, os.path.join(RUNS, f"skew-{s}-alpha{a}")) for a in ALPHAS],
                False, ALPHAS, "alpha", True)
sweep_table("global-pool", [(g, os.path.join(RUNS, f"global-synthetic-g{g}")) for g in
                            ("0", "0.05", "0.2")], True, None, "global_fraction", False)
sweep_table("global-pool-lenet5", [(g, os.path.join(RUNS, f"global-lenet5-g{g}")) for g in
                                   ("0", "0.05", "0.2")], True, None, "global_fraction", False)
importance_table()
