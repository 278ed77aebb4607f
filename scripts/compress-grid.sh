#!/usr/bin/env bash
# The compression grid of issue 14 on the simulator: every compressor, with and without error feedback for topk and sign, at two
# bandwidths, for each policy; then a markdown table (final accuracy, virtual
# seconds to a target accuracy, bytes per update, compression ratio).
#
# Defaults are the issue's full grid (LeNet-5 on Fashion-MNIST, 16 simulated
# workers, async and hybrid, 10 Gbit/s and 100 Mbit/s): costly. The reduced
# grids of docs/results-compression.md (section Compression) give their commands, e.g.
#   MODEL=lenet5 COMPUTE_TIME=0.013 LR=0.02 POLICIES=async BANDWIDTHS=1.25e7 \
#     PULL=same BUDGET=12 scripts/compress-grid.sh runs/c14/async-100M
# The push is compressed with each compressor; the pull with PULL (none by
# default; PULL=same compresses it with the push's compressor too, except
# randomk, which is refused on the pull path: its pull stays none and its row
# says so). LR, EPOCHS (0 = none: a fixed number of gradients instead of, or
# as well as, BUDGET), SEED, SIM_THREADS and EXTRA (more "--set key=value"
# arguments, space-separated) apply to every cell alike. SUMMARY_ONLY=1 only
# prints the table of what OUT_DIR holds. A cell whose summary.json exists is
# not run again, so two invocations with disjoint COMPRESSORS can share OUT_DIR.
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
LR=${LR:-0.01}
EPOCHS=${EPOCHS:-0}
SEED=${SEED:-1}
SIM_THREADS=${SIM_THREADS:-0}               # cores computing gradients; same output for any value
EXTRA=${EXTRA:-}                            # e.g. "optim.kind=momentum optim.momentum=0.5"
SUMMARY_ONLY=${SUMMARY_ONLY:-0}
extra=()
for kv in $EXTRA; do extra+=(--set "$kv"); done
mkdir -p "$OUT"
[[ $SUMMARY_ONLY == 1 ]] && POLICIES=""
for policy in $POLICIES; do
  for bw in $BANDWIDTHS; do
    for zc in $COMPRESSORS; do
      z=${zc%/noef}
      ef=auto
      [[ $zc == */noef ]] && ef=false
      name="${policy}_bw${bw}_${zc//[:\/]/_}"
      [[ -f $OUT/$name/summary.json ]] && continue
      pull=$PULL
      [[ $PULL == same ]] && pull=$z
      # randomk is refused on the pull path (README, Compression).
      [[ $pull == randomk:* ]] && pull=none
      "$HSGD" train --data fashion-mnist --model "$MODEL" --runtime sim --workers "$WORKERS" \
        --policy "$policy" --budget "$BUDGET" --epochs "$EPOCHS" --eval-every "$EVAL_EVERY" --quiet \
        --lr "$LR" --seed "$SEED" --out "$OUT/$name" \
        --set train.eval_samples="$EVAL_SAMPLES" --set sim.bandwidth="$bw" \
        --set sim.compute_time="$COMPUTE_TIME" --set sim.server_ns_per_param=1 \
        --set sim.threads="$SIM_THREADS" \
        --set compress.push="$z" --set compress.pull="$pull" \
        --set compress.error_feedback="$ef" --set compress.sim_ns_per_param=-1 "${extra[@]}"
    done
  done
done
# The table (markdown on stdout, the same rows in OUT_DIR/summary.csv):
# "first >= target": the first evaluation at or above TARGET (virtual s and
# updates); "held": the first evaluation at which the mean of it and the
# three before it (one virtual second at eval_every 0.25) is at or above TARGET;
# "last 4": the mean of the last four evaluations; with AT=T also the
# accuracy of the last evaluation at or before virtual second T. Bytes are
# pushed + pulled: per update, and per gradient (a push and its pull; the two
# differ only when an update aggregates K > 1 pushes, as hybrid's do).
python3 - "$OUT" "$TARGET" "${AT:-}" <<'PY'
import csv, json, os, sys
out, target = sys.argv[1], float(sys.argv[2])
at = float(sys.argv[3]) if sys.argv[3] else None
cols = ["policy", "bandwidth (B/s)", "push", "pull", "EF", "final acc", "last 4"]
if at is not None:
    cols.append(f"acc at {at:g} s")
cols += [f"s to {target:.0%}", f"updates to {target:.0%}", f"s to {target:.0%} held", "bytes/update", "bytes/gradient",
         "push ratio", "pull ratio", "updates", "gradients", "virtual s"]
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
names = [n for n in sorted(os.listdir(out)) if os.path.exists(os.path.join(out, n, "summary.json"))]
sums = {n: json.load(open(os.path.join(out, n, "summary.json"))) for n in names}
# Without compression summary.json has no [compress] totals: every push and
# pull carries 4 bytes per parameter (taken from a compressed run's summary).
plain = next((s["compress"]["plain_bytes_per_message"] for s in sums.values() if "compress" in s), None)
table = []
for name in names:
    d = os.path.join(out, name)
    s = sums[name]
    rows = list(csv.DictReader(open(os.path.join(d, "metrics.csv"))))
    workers = len(s.get("worker_pushes", [])) or 1
    pulls = s["gradients"] + workers  # each push is followed by a pull, plus each worker's first
    if "compress" not in s:
        p = plain or 0
        s["compress"] = {"push": "none", "pull": "none", "error_feedback": False,
                         "bytes_pushed": p * s["gradients"], "bytes_pulled": p * pulls,
                         "bytes_per_push": p, "plain_bytes_per_message": p}
    z = s["compress"]
    acc = [float(r["test_acc"]) for r in rows]
    t = [float(r["time_s"]) for r in rows]
    first = next((i for i, a in enumerate(acc) if a >= target), None)
    held = next((i for i in range(4, len(acc)) if sum(acc[i - 3:i + 1]) / 4 >= target), None)
    last = rows[-1]
    updates = int(last["updates"])
    moved = z["bytes_pushed"] + z["bytes_pulled"]
    ratio = z["plain_bytes_per_message"] / z["bytes_per_push"] if z["bytes_per_push"] else float("nan")
    pull_ratio = z["plain_bytes_per_message"] * pulls / z["bytes_pulled"] if z["bytes_pulled"] else float("nan")
    policy, bw, _ = name.split("_", 2)
    ef = "no" if "_noef" in name else ("yes" if z.get("error_feedback") else "-")
    row = [policy, bw[2:], z["push"], z["pull"], ef, "%.3f" % acc[-1], "%.3f" % (sum(acc[-4:]) / len(acc[-4:]))]
    if at is not None:
        row.append("%.3f" % [a for a, tt in zip(acc, t) if tt <= at + 1e-9][-1])
    row += ["%.2f" % t[first] if first is not None else "not reached",
            rows[first]["updates"] if first is not None else "-",
            "%.2f" % t[held] if held is not None else "not reached",
            "%.0f" % (moved / max(1, updates)), "%.0f" % (moved / max(1, s["gradients"])), "%.1f" % ratio, "%.1f" % pull_ratio,
            str(updates), str(s["gradients"]), "%.2f" % t[-1]]
    table.append(row)
    print("| " + " | ".join(row) + " |")
with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(cols)
    w.writerows(table)
PY
