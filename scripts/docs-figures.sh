#!/usr/bin/env bash
# The figures that open the results pages, docs/img/results-*.png, drawn with
# gnuplot from data committed under docs/results/ (nothing is rerun):
#   scripts/docs-figures.sh          (or: make figures)
# results-paper.png          docs/results/synthetic-step300/compare.json
# results-data-regimes.png   docs/results/data-regimes/skew-synthetic.dat
# results-auto.png           docs/results/sweep/{sweep-mlp,fourteenth-sweep-mlp}/sweep.json
# results-compression.png    docs/results/compress/lenet5-async-100M.csv
# results-sparse.png         docs/results/sparse/auc.dat
set -euo pipefail
cd "$(dirname "$0")/.."
R=docs/results
OUT=docs/img
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TERM_PNG="set terminal pngcairo size 900,480 font 'sans,11'"

# The paper replication: final test accuracy per policy, mean ± std over rounds.
python3 - "$R/synthetic-step300/compare.json" > "$tmp/paper.dat" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["policies"]:
    f = p["final_test_acc"]
    print(f'"{p["policy"]}" {100 * f["mean"]:.2f} {100 * f["std"]:.2f}')
PY
gnuplot <<GP
$TERM_PNG
set output "$OUT/results-paper.png"
set title "Synthetic set, 25 workers, 50 % stragglers, 100 virtual s (5 rounds)"
set ylabel "final test accuracy (%)"
set yrange [0:100]
set style data histograms
set style histogram errorbars gap 2 lw 1
set style fill solid 0.6 border -1
set boxwidth 0.8
set grid ytics
unset key
plot "$tmp/paper.dat" using 2:3:xtic(1) lc rgb "#3465a4"
GP

# Label skew: final accuracy per policy against Dirichlet alpha.
gnuplot <<GP
$TERM_PNG
set output "$OUT/results-data-regimes.png"
set title "Synthetic set, 16 workers: final test accuracy against label skew"
set xlabel "Dirichlet alpha (smaller = more skewed)"
set ylabel "final test accuracy (%)"
set logscale x
set grid
set key bottom right
plot for [c=2:7] "$R/data-regimes/skew-synthetic.dat" using 1:c with linespoints lw 2 title columnheader(c)
GP

# auto (today's rule, the fourteenth) − best fixed policy, per cell of the
# MLP grid (interval mean, pp): the fixed policies from sweep-mlp, the rule
# from its own sweep of the same cells and seeds.
python3 - "$R/sweep/sweep-mlp/sweep.json" "$R/sweep/fourteenth-sweep-mlp/sweep.json" \
    "auto+policy.auto_rule=14" > "$tmp/auto.dat" <<'PY'
import json, sys
fixed = json.load(open(sys.argv[1]))["cells"]
rule = {tuple(sorted(c["at"].items())): c["policies"][sys.argv[3]]
        for c in json.load(open(sys.argv[2]))["cells"]}
short = {"optim.lr": "lr", "stragglers.sigma": "s", "train.batch": "b"}
for i, c in enumerate(fixed):
    best = max(v["interval_mean"]["mean"] for p, v in c["policies"].items()
               if not p.startswith("auto"))
    auto = rule[tuple(sorted(c["at"].items()))]["interval_mean"]["mean"]
    label = " ".join(f'{short.get(k, k)}={v}' for k, v in c["at"].items())
    print(f'{i} {100 * (auto - best):.3f} "{label}"')
PY
gnuplot <<GP
set terminal pngcairo size 1100,520 font 'sans,10'
set output "$OUT/results-auto.png"
set title "auto (the fourteenth rule) − best fixed policy per cell, MLP grid, 25 workers, 3 seeds, 100 virtual s"
set ylabel "interval mean, percentage points"
set yrange [-1.5:0.5]
set style fill solid 0.6 border -1
set boxwidth 0.8
set xtics rotate by 60 right font ',8'
set grid ytics
set arrow from graph 0, first -1 to graph 1, first -1 nohead dt 2 lc rgb "red"
set label "target: within 1 pp" at graph 0.01, first -1.1 tc rgb "red"
unset key
plot "$tmp/auto.dat" using 1:2:xtic(3) with boxes lc rgb "#3465a4"
GP

# Compression: LeNet-5, async, 100 Mbit/s, accuracy at 12 virtual s per compressor.
python3 - "$R/compress/lenet5-async-100M.csv" > "$tmp/compress.dat" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    name = r["push"] if r["push"] == r["pull"] else f'{r["push"]} / {r["pull"]}'
    if r["EF"] == "no":
        name += " (no EF)"
    print(f'"{name}" {100 * float(r["acc at 12 s"]):.1f}')
PY
gnuplot <<GP
$TERM_PNG
set output "$OUT/results-compression.png"
set title "LeNet-5, async, 16 workers, 100 Mbit/s: test accuracy at 12 virtual s"
set ylabel "test accuracy (%)"
set yrange [0:100]
set style fill solid 0.6 border -1
set boxwidth 0.7
set xtics rotate by 30 right
set grid ytics
unset key
plot "$tmp/compress.dat" using 0:2:xtic(1) with boxes lc rgb "#3465a4"
GP

# Sparse models: test AUC per run.
gnuplot <<GP
$TERM_PNG
set output "$OUT/results-sparse.png"
set title "dlrm on synthetic-ctr, row-sparse, 5 epochs: test AUC"
set ylabel "test AUC"
set yrange [0.64:0.68]
set style fill solid 0.6 border -1
set boxwidth 0.6
set grid ytics
unset key
plot "$R/sparse/auc.dat" using 0:3:xtic(1) with boxes lc rgb "#3465a4"
GP
echo "wrote $OUT/results-{paper,data-regimes,auto,compression,sparse}.png"
