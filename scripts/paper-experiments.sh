#!/usr/bin/env bash
# Runs the paper's experiments (examples/paper/) in the simulator with
# `hsgd compare` and copies each table and plot into docs/results/NAME/.
# Deterministic: the simulator's costs are fixed in the configs, so the same
# commit gives the same tables on any machine. About 15-20 minutes on 2 cores.
#   scripts/paper-experiments.sh [NAME...]   (default: all)
# SIM_THREADS=T sets sim.threads for every run (default: the simulator's,
# every core); the outputs are the same for any T (docs/benchmarks-history.md times 1 and 2).
set -euo pipefail
cd "$(dirname "$0")/.."
HSGD=${HSGD:-build/release/hsgd}
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-runs/paper}
SYN=examples/paper/synthetic.toml
POL=sync,async,hybrid,kasync:12

run() {  # NAME CONFIG POLICIES ROUNDS [--set ...]
  local name=$1 config=$2 policies=$3 rounds=$4
  shift 4
  if [ ${#SELECTED[@]} -gt 0 ] && [[ ! " ${SELECTED[*]} " =~ " ${name} " ]]; then return; fi
  echo "== $name"
  "$HSGD" compare --config "$config" --policies "$policies" --rounds "$rounds" \
    --out "$OUT/$name" ${SIM_THREADS:+--set sim.threads=$SIM_THREADS} "$@" > /dev/null
  mkdir -p "docs/results/$name"
  cp "$OUT/$name/compare.md" "$OUT/$name/compare.png" "$OUT/$name/compare.json" "docs/results/$name/"
}

SELECTED=("$@")
# The headline setup, step 300 and 500, with the mean (default) and the sum aggregation.
run synthetic-step300 $SYN $POL "$ROUNDS"
run synthetic-step500 examples/paper/synthetic-step500.toml $POL "$ROUNDS"
run synthetic-step300-sum $SYN $POL "$ROUNDS" --set policy.aggregation=sum
# Table 3: batch size.
for b in 16 64; do run synthetic-batch$b $SYN sync,async,hybrid "$ROUNDS" --set train.batch=$b; done
# Table 4: step size (300 and 500 above).
for s in 100 1000; do run synthetic-step$s $SYN sync,async,hybrid "$ROUNDS" --set policy.step=$s; done
# Table 5: delay sigma (0.25 above).
for g in 0.1 0.5; do run synthetic-sigma$g $SYN sync,async,hybrid "$ROUNDS" --set stragglers.sigma=$g; done
# The related methods (issue #4) on the headline synthetic setup.
run related-methods $SYN "sync,async,hybrid,hybrid+policy.schedule=adaptive,kasync:12,ssp:3,async+staleness.scaled_lr=true,async+staleness.dc_asgd=true,async+staleness.gap_aware=true,local:4" "$ROUNDS"
# Fashion-MNIST with LeNet-5, standing in for MNIST and CIFAR-10.
run fashion-mnist-lenet5 examples/paper/fashion-mnist-lenet5.toml sync,async,hybrid 3
