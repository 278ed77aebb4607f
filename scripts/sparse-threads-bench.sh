#!/bin/sh
# The threads-runtime efficiency figure of docs/benchmarks-history.md (issue 16), in one
# run so that every number sees the same machine load: compute-only on 1 and
# on 2 concurrent threads (tests/sparse_bench), then the threads runtime
# with 2 workers, row-sparse, async, at the issue's size (8 tables x 100k
# rows x dim 16, batch 2048). Prints summary.json's samples/s and its
# per-batch sampling and gradient times. With `mpi` as the second argument,
# the same job over mpirun next (1 server rank + 2 worker ranks), after the
# threads run, in the same load. Usage: scripts/sparse-threads-bench.sh [seconds [mpi]]
set -eu
S=${1:-6}
MPI=${2:-}
B=build/release
OUT=${TMPDIR:-/tmp}/hsgd-sparse-threads
rm -rf "$OUT"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
$B/tests/sparse_bench 8 100000 16 2048 50000 "$S" | grep -E "compute-only|gradient, one thread"
JOB="train --quiet --model dlrm --data synthetic-ctr --set data.ctr_samples=50000 \
  --set model.table_rows=100000 --set data.ctr_fields=8 --set model.embedding_dim=16 \
  --set model.hidden=[64] --set model.top_hidden=[64] --batch 2048 --policy async \
  --budget $S --set train.eval_every=$S --set train.eval_samples=2000 --set optim.lr=0.1 \
  --set model.sparse=true"
report() {
  python3 - "$1/summary.json" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j.get("sampling")
line = f"{sys.argv[2]}, 2 workers, row-sparse: {j['samples_per_s']:.0f} samples/s"
if s:
    line += (f"; per batch: sampling + rows {1000 * s['sampling_s_per_batch']:.1f} ms, "
             f"gradient {1000 * s['gradient_s_per_batch']:.1f} ms, {s['batches']} batches")
print(line + f" in {j['train_s']:.2f} s")
PY
}
# shellcheck disable=SC2086
$B/hsgd $JOB --workers 2 --out "$OUT" 2>/dev/null
report "$OUT" "threads runtime"
if [ "$MPI" = mpi ]; then
  rm -rf "$OUT-mpi"
  # shellcheck disable=SC2086
  mpirun --oversubscribe --allow-run-as-root -np 3 $B/hsgd $JOB --runtime mpi --servers 1 \
    --out "$OUT-mpi" 2>/dev/null
  report "$OUT-mpi" "mpi runtime (1 server rank)"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
