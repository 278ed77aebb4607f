#!/usr/bin/env bash
# The compression grid of issue 14 on the simulator: every compressor, with and without error feedback for topk and sign, at two
# bandwidths, for each policy; then a markdown table (final accuracy, virtual
# seconds to a target accuracy, bytes per update, compression ratio).
#
# Defaults are the issue's full grid (LeNet-5 on Fashion-MNIST, 16 simulated
# workers, async and hybrid, 10 Gbit/s and 100 Mbit/s): costly. The reduced
# grid of docs/results.md is
#   MODEL=softmax BUDGET=2 POLICIES=async TARGET=0.75 scripts/compress-grid.sh
# The push is compressed with each compressor; the pull with PULL (none by
# default; PULL=same compresses it with the push's compressor too).
# Usage: [VAR=value ...] scripts/compress-grid.sh [OUT_DIR]
set -euo pipefail
HSGD=${HSGD:-build/release/hsgd}
OUT=${1:-runs/compress-grid}
MODEL=${MODEL:-lenet5}
WORKERS=${WORKERS:-16}
BUDGET=${BUDGET:-60}
EVAL_EVERY=${EVAL_EVERY:-0.25}
EVAL_SAMPLES=${EVAL_SAMPLES:-2000}
POLICIES=${POLICIES:-"async hybrid"}
BANDWIDTHS=${BANDWIDTHS:-"1.25e9 1.25e7"}   # bytes/s: 10 Gbit/s, 100 Mbit/s
COMPUTE_TIME=${COMPUTE_TIME:-0}             # 0 = calibrate on this machine
TARGET=${TARGET:-0.85}
PULL=${PULL:-none}                          # the pull compressor: none, or "same" as the push
COMPRESSORS=${COMPRESSORS:-"none fp16 topk:0.01 randomk:0.01 qsgd:16 sign powersgd:2 topk:0.01/noef sign/noef"}
mkdir -p "$OUT"
for policy in $POLICIES; do
  for bw in $BANDWIDTHS; do
    for zc in $COMPRESSORS; do
      z=${zc%/noef}
      ef=auto
      [[ $zc == */noef ]] && ef=false
      name="${policy}_bw${bw}_${zc//[:\/]/_}"
      [[ -f $OUT/$name/summary.json ]] && continue
      # randomk is refused on the pull path (README, Compression).
      [[ $PULL == same && $z == randomk:* ]] && continue
      "$HSGD" train --data fashion-mnist --model "$MODEL" --runtime sim --workers "$WORKERS" \
        --policy "$policy" --budget "$BUDGET" --eval-every "$EVAL_EVERY" --quiet \
        --out "$OUT/$name" \
        --set train.eval_samples="$EVAL_SAMPLES" --set sim.bandwidth="$bw" \
        --set sim.compute_time="$COMPUTE_TIME" --set sim.server_ns_per_param=1 \
        --set compress.push="$z" --set compress.pull="$([[ $PULL == same ]] && echo "$z" || echo "$PULL")" \
        --set compress.error_feedback="$ef" --set compress.sim_ns_per_param=-1
    done
  done
done
python3 - "$OUT" "$TARGET" <<'PY'
import csv, json, os, sys
out, target = sys.argv[1], float(sys.argv[2])
print(f"| policy | bandwidth (B/s) | compressor | final acc | mean acc | virtual s to {target:.0%} "
      "| bytes/update | push ratio | updates |")
print("|---|---|---|---|---|---|---|---|---|")
names = [n for n in sorted(os.listdir(out)) if os.path.exists(os.path.join(out, n, "summary.json"))]
sums = {n: json.load(open(os.path.join(out, n, "summary.json"))) for n in names}
# Without compression summary.json has no [compress] totals: every push and
# pull carries 4 bytes per parameter (taken from a compressed run's summary).
plain = next(s["compress"]["plain_bytes_per_message"] for s in sums.values() if "compress" in s)
for name in names:
    d = os.path.join(out, name)
    s = sums[name]
    if "compress" not in s:
        s["compress"] = {"bytes_pushed": plain * s["gradients"], "bytes_pulled": plain * s["gradients"],
                         "bytes_per_push": plain, "plain_bytes_per_message": plain}
    rows = list(csv.DictReader(open(os.path.join(d, "metrics.csv"))))
    hit = next((float(r["time_s"]) for r in rows if float(r["test_acc"]) >= target), None)
    last = rows[-1]
    accs = [float(r["test_acc"]) for r in rows[1:]]  # the rows after t = 0
    mean_acc = sum(accs) / max(1, len(accs))
    z = s["compress"]
    updates = int(last["updates"])
    moved = z["bytes_pushed"] + z["bytes_pulled"]
    ratio = z["plain_bytes_per_message"] / z["bytes_per_push"]
    policy, bw, comp = name.split("_", 2)
    comp = comp.replace("_noef", " (no EF)").replace("_", ":", 1)
    reached = "%.2f" % hit if hit is not None else "not reached"
    print(f"| {policy} | {bw[2:]} | {comp} | {float(last['test_acc']):.3f} | {mean_acc:.3f} | {reached} | "
          f"{moved / max(1, updates):.0f} | {ratio:.1f} | {updates} |")
PY
