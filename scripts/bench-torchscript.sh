#!/bin/sh
# LeNet-5 from the zoo (--model lenet5) against the same network exported from
# Python (tests/data/torchscript/lenet5_scripted.pt, --model torchscript:FILE):
# training samples/s of `hsgd train` on Fashion-MNIST, 1 worker, async,
# batch 64, alternated over rounds so both see the same machine load.
#   scripts/bench-torchscript.sh [SECONDS] [ROUNDS]
set -eu
hsgd=${HSGD:-build/release/hsgd}
seconds=${1:-10}
rounds=${2:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq "$rounds"); do
  for model in lenet5 torchscript:tests/data/torchscript/lenet5_scripted.pt; do
    "$hsgd" train --quiet --data fashion-mnist --model "$model" --workers 1 --policy async \
      --batch 64 --budget "$seconds" --eval-every 1000 --set train.eval_samples=500 --out "$out/run"
    sps=$(sed -n 's/.*"samples_per_s": \([0-9.e+]*\).*/\1/p' "$out/run/summary.json")
    echo "round $round  $model  samples/s $sps"
  done
done
