#!/bin/sh
# Runs the sweeps of issue 17 (docs/results-auto.md, "auto against the best fixed
# policy"). Usage: scripts/sweep.sh [reduced|rerun|heldout|design|full] [OUT]
#   reduced (default): the grids docs/results-auto.md reports (~35 CPU-minutes):
#     sweep-momentum, sweep-mlp-reduced, sweep-ablation, sweep-mlp-batch,
#     sweep-lenet5-reduced.
#   rerun: auto alone (and its ablations) on the reduced grids' cells, the
#     fixed policies' figures taken from the committed sweep.json files
#     (docs/results-auto.md, "The third rule"; ~15 CPU-minutes).
#   heldout: the 15 MLP cells outside the reduced grid and the batch slice,
#     7 policies, 1 seed, 30 s (sweep-mlp-rest, sweep-mlp-rest-s025;
#     105 runs, ~7 CPU-minutes); scripts/mlp27.py then tabulates all 27 cells.
#   design: the design cells of the fourth rule's staleness budget
#     (design-budget: batch 32, seeds 11-12, 100 s; 126 runs, ~6 CPU-minutes)
#     and of the fifth rule's spike cap (design-lenet5-spike: the LeNet-5
#     slice, seeds 11-12, 100 s; 48 runs, ~25 CPU-minutes).
#   full: the issue's grids, sweep-mlp (972 runs, ~40 CPU-minutes) and
#     sweep-lenet5 (144 runs, ~3 CPU-hours), the third rule alone on both
#     (sweep-mlp-third, sweep-lenet5-third: 81 and 12 runs) and
#     sweep-momentum (15 runs); resumable (rerun to continue).
#     scripts/auto-full.py [OUT] then tabulates them (docs/results-auto.md).
# HSGD names the binary (default build/release/hsgd); JOBS, if set, the runs
# at a time (--jobs; default: the grid's, 2). Every sweep resumes:
# runs already done are skipped.
set -eu
cd "$(dirname "$0")/.."
HSGD=${HSGD:-build/release/hsgd}
MODE=${1:-reduced}
OUT=${2:-docs/results/sweep}
case "$MODE" in
  reduced) GRIDS="sweep-momentum sweep-mlp-reduced sweep-ablation sweep-mlp-batch sweep-lenet5-reduced" ;;
  rerun) GRIDS="rerun-auto-mlp-reduced rerun-auto-lenet5-reduced rerun-auto-mlp-batch rerun-auto-momentum sweep-ablation" ;;
  heldout) GRIDS="sweep-mlp-rest sweep-mlp-rest-s025" ;;
  design) GRIDS="design-budget design-lenet5-spike" ;;
  full) GRIDS="sweep-mlp sweep-mlp-third sweep-lenet5 sweep-lenet5-third sweep-momentum" ;;
  *) echo "usage: scripts/sweep.sh [reduced|rerun|heldout|design|full] [OUT]" >&2; exit 2 ;;
esac
for g in $GRIDS; do
  "$HSGD" sweep "examples/sweep/$g.toml" --out "$OUT/$g" ${JOBS:+--jobs "$JOBS"} > /dev/null
done
