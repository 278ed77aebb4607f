#!/usr/bin/env bash
# Issue 15's experiments in the simulator: policies under label skew
# (dirichlet alpha sweep), the hybrid data regime (global pool), importance
# vs uniform sampling. Writes the tables and plots into
# docs/results/data-regimes/ (docs/results-data-regimes.md, "Data as it really lies").
# Deterministic (fixed simulator costs). On 2 shared cores: the synthetic
# sweeps take ~15 min, the LeNet-5 ones ~1 min per run.
#   scripts/data-regimes.sh [SECTION...]   sections: skew-synthetic skew-lenet5
#                                          global importance importance-long overhead
#                                          (default: all)
# Knobs: ROUNDS (1), LENET_BUDGET (virtual seconds for LeNet-5 runs, 30),
# LENET_ALPHAS (the alphas of the LeNet-5 skew sweep, all five).
set -euo pipefail
cd "$(dirname "$0")/.."
HSGD=${HSGD:-build/release/hsgd}
ROUNDS=${ROUNDS:-1}
OUT=${OUT:-runs/data-regimes}
DOCS=docs/results/data-regimes
SYN=examples/paper/synthetic.toml
LENET=examples/paper/fashion-mnist-lenet5.toml
LENET_BUDGET=${LENET_BUDGET:-30}
LENET_ALPHAS=${LENET_ALPHAS:-"0.05 0.1 0.5 1 100"}
POL="sync,async,hybrid,hybrid+policy.schedule=adaptive,ssp:3,local:4"
# 16 simulated workers, the paper's stragglers (50 % at |N(0, 0.25)| s, in the configs).
W=(--set train.workers=16)
SELECTED=("$@")
want() { [ ${#SELECTED[@]} -eq 0 ] || [[ " ${SELECTED[*]} " =~ " $1 " ]]; }

run() {  # NAME CONFIG POLICIES [--set ...]
  local name=$1 config=$2 policies=$3
  shift 3
  echo "== $name ($(date -u +%H:%M:%S))"
  "$HSGD" compare --config "$config" --policies "$policies" --rounds "$ROUNDS" --runtime sim \
    --out "$OUT/$name" "${W[@]}" "$@" > /dev/null
}

if want skew-synthetic; then
  for a in 0.05 0.1 0.5 1 100; do
    run "skew-synthetic-alpha$a" $SYN $POL --set data.partition=dirichlet --set data.alpha=$a
  done
fi
if want skew-lenet5; then
  for a in $LENET_ALPHAS; do
    run "skew-lenet5-alpha$a" $LENET $POL --set data.partition=dirichlet --set data.alpha=$a \
      --set train.budget="$LENET_BUDGET"
  done
fi
if want global; then
  for g in 0 0.05 0.2; do
    run "global-synthetic-g$g" $SYN $POL --set data.partition=dirichlet --set data.alpha=0.1 \
      --set data.global_fraction=$g
  done
fi
if want importance; then
  # IID shards; uniform vs loss-proportional sampling under async and sync.
  # Evaluations every virtual second to time the targets.
  IMP="async,async+sampling.kind=loss,sync,sync+sampling.kind=loss"
  run importance-synthetic $SYN $IMP --set train.eval_every=1
  run importance-lenet5 $LENET $IMP --set train.eval_every=1 --set train.budget="$LENET_BUDGET"
fi
if want importance-long; then
  # One worker, no stragglers, 600 virtual s (~6000 updates, 4 epochs):
  # importance sampling on its own, later in training.
  run importance-lenet5-1worker $LENET async,async+sampling.kind=loss --set train.workers=1 \
    --set stragglers.fraction=0 --set train.budget=600 --set train.eval_every=10
fi
if want overhead; then
  # The per-batch cost of importance sampling, measured apart from the
  # simulator: one worker on threads without straggler delays, one epoch
  # each, uniform and loss (warmup 0) alternated twice; the report keeps
  # each kind's fastest run.
  for set in synthetic lenet5; do
    config=$SYN
    [ $set = lenet5 ] && config=$LENET
    for rep in 1 2; do
      for kind in uniform loss; do
        echo "== overhead-$set-$kind-$rep ($(date -u +%H:%M:%S))"
        "$HSGD" train --config "$config" --runtime threads --workers 1 --set train.budget=0 \
          --set train.epochs=1 --set train.eval_every=1000 --set sampling.kind=$kind \
          --set sampling.warmup=0 --set stragglers.fraction=0 \
          --out "$OUT/overhead-$set-$kind-$rep" --quiet
      done
    done
  done
fi
mkdir -p "$DOCS"
python3 scripts/data_regimes_report.py "$OUT" "$DOCS"
echo "tables and plots in $DOCS"
