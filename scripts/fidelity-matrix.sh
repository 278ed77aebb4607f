#!/usr/bin/env bash
# fidelity-matrix.sh OUT [ROUNDS] [BUDGET]: the simulator held against real
# runs (docs/simulator.md, "Real against simulated"): LeNet-5 on
# Fashion-MNIST (examples/fidelity/lenet5.toml), sync, async and hybrid,
#   - mpi, 1 server + 3 workers on four emulated hosts (needs root), links
#     unlimited, 100 Mbit/s and 20 Mbit/s;
#   - threads, 2 and 4 workers;
# each against the simulator with the same network and calibrated costs,
# ROUNDS rounds (default 3) of BUDGET training seconds (default: the
# config's 40). Writes OUT/<cell>/fidelity.{md,json}, then OUT/matrix.md.
# Run it on an otherwise idle machine: the real runs' timings are the point.
set -euo pipefail
out=${1:?usage: fidelity-matrix.sh OUT [ROUNDS] [BUDGET]} rounds=${2:-3} budget=${3:-}
hsgd=${HSGD:-build/release/hsgd}
cfg=examples/fidelity/lenet5.toml
extra=()
[[ -z "$budget" ]] || extra+=(--set "train.budget=$budget")
mkdir -p "$out"
cells=()
for rate in unlimited 100mbit 20mbit; do
  r=()
  [[ $rate == unlimited ]] || r=(--rate "$rate")
  "$hsgd" fidelity --config "$cfg" --policies sync,async,hybrid --hosts 4 "${r[@]}" \
    --rounds "$rounds" "${extra[@]}" --out "$out/mpi-$rate"
  cells+=("mpi-$rate")
done
for w in 2 4; do
  "$hsgd" fidelity --config "$cfg" --policies sync,async,hybrid --real threads --workers "$w" \
    --rounds "$rounds" "${extra[@]}" --out "$out/threads-$w"
  cells+=("threads-$w")
done
{
  echo "# hsgd fidelity matrix ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo ?))"
  for c in "${cells[@]}"; do
    echo
    echo "## $c"
    echo
    cat "$out/$c/fidelity.md"
  done
} >"$out/matrix.md"
echo "fidelity-matrix: $out/matrix.md"
