#!/usr/bin/env bash
# The network study of issue 27 on the simulator (sim.network = "shared"):
# samples/s against workers for each policy, link rate and server shard
# count, with fixed costs so every cell is comparable; then a table with
# the predicted plateau and knee next to what was measured.
#
# Defaults: LeNet-5 on Fashion-MNIST, batch 32, compute 10 ms per batch,
# 1 ns per parameter of server time, 100 us latency; workers 8 to 256;
# 1 Gbit/s and 100 Mbit/s (every link; the servers' too); 1 and 4 shards;
# sync, async, hybrid and async with topk:0.01 pushes. Virtual budgets are
# short (ROUNDS sync rounds, below), and only the first and last rows are
# evaluated (on EVAL_SAMPLES test samples): the figure is throughput.
#   scripts/net-study.sh runs/net-study            # the grid
#   SUMMARY_ONLY=1 scripts/net-study.sh runs/net-study
# A cell whose summary.json exists is not run again.
set -euo pipefail
HSGD=${HSGD:-build/release/hsgd}
OUT=${1:-runs/net-study}
MODEL=${MODEL:-lenet5}
WORKERS=${WORKERS:-"8 16 32 64 128 256"}
RATES=${RATES:-"1.25e8 1.25e7"}  # bytes/s: 1 Gbit/s, 100 Mbit/s
SHARDS=${SHARDS:-"1 4"}
POLICIES=${POLICIES:-"sync async hybrid async+topk"}
COMPUTE_TIME=${COMPUTE_TIME:-0.01}
SERVER_NS=${SERVER_NS:-1}
LATENCY=${LATENCY:-0.0001}
BATCH=${BATCH:-32}
EVAL_SAMPLES=${EVAL_SAMPLES:-1000}
SIM_THREADS=${SIM_THREADS:-2}
SUMMARY_ONLY=${SUMMARY_ONLY:-0}
# async with 256 workers diverges at the default lr without it (the figure is
# throughput, which clipping does not change; a stopped cell is marked "*")
CLIP_NORM=${CLIP_NORM:-5}
mkdir -p "$OUT"

# ROUNDS x the predicted time of one sync round of n workers over S shards
# (every push into, then every pull out of, the shards' links, plus one
# compute and three latencies), so every cell makes about ROUNDS x n pushes
# and a sync cell is not cut by more than a round in ROUNDS.
ROUNDS=${ROUNDS:-12}
budget_for() {  # rate, shards, workers
  python3 -c "print(round($ROUNDS * ($3 * (4 * 61706 * 2 + 72) / ($2 * $1) + $COMPUTE_TIME + 3 * $LATENCY), 4))"
}

if [[ $SUMMARY_ONLY != 1 ]]; then
  for rate in $RATES; do
    for shards in $SHARDS; do
      for policy in $POLICIES; do
        for n in $WORKERS; do
          budget=$(budget_for "$rate" "$shards" "$n")
          cell="$OUT/$rate-s$shards-$policy-w$n"
          [[ -f $cell/summary.json ]] && continue
          extra=()
          name=$policy
          if [[ $policy == async+topk ]]; then
            name=async
            extra=(--set compress.push=topk:0.01 --set compress.sim_ns_per_param=0)
          fi
          "$HSGD" train --data fashion-mnist --model "$MODEL" --runtime sim --policy "$name" \
            --workers "$n" --budget "$budget" --quiet --out "$cell" \
            --set train.batch="$BATCH" --set train.eval_every="$budget" \
            --set train.eval_samples="$EVAL_SAMPLES" --set train.servers="$shards" \
            --set sim.compute_time="$COMPUTE_TIME" --set sim.server_ns_per_param="$SERVER_NS" \
            --set sim.latency="$LATENCY" --set sim.bandwidth="$rate" \
            --set sim.threads="$SIM_THREADS" --set optim.clip_norm="$CLIP_NORM" "${extra[@]}" ||
            echo "exit $? (summary.json says why)" >&2
          echo "done $cell" >&2
        done
      done
    done
  done
fi

python3 - "$OUT" "$COMPUTE_TIME" "$LATENCY" "$BATCH" <<'EOF'
import json, os, sys, glob, re
out, compute, latency, batch = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
cells = {}
for f in glob.glob(os.path.join(out, '*', 'summary.json')):
    m = re.match(r'(.+)-s(\d+)-(.+)-w(\d+)$', os.path.basename(os.path.dirname(f)))
    if not m:
        continue
    s = json.load(open(f))
    rate, shards, policy, n = float(m[1]), int(m[2]), m[3], int(m[4])
    params = s['num_params'] if 'num_params' in s else None
    cells[(rate, shards, policy, n)] = s
rates = sorted({k[0] for k in cells}, reverse=True)
shards_l = sorted({k[1] for k in cells})
policies = [p for p in ['sync', 'async', 'hybrid', 'async+topk'] if any(k[2] == p for k in cells)]
workers = sorted({k[3] for k in cells})
print('| link | shards | policy | ' + ' | '.join(f'{n} w' for n in workers) + ' | busiest util at 256 |')
print('|---|---|---|' + '---|' * len(workers) + '---|')
for rate in rates:
    for S in shards_l:
        for p in policies:
            row = []
            util = ''
            for n in workers:
                s = cells.get((rate, S, p, n))
                row.append((f"{s['samples_per_s']:.0f}" + ('*' if s.get('stopped') else '')) if s else '')
                if s and n == max(workers) and 'network' in s:
                    util = f"{s['network']['busiest_util']:.2f}"
            link = f'{rate * 8 / 1e9:g} Gbit/s' if rate >= 1.25e8 else f'{rate * 8 / 1e6:g} Mbit/s'
            print(f'| {link} | {S} | {p} | ' + ' | '.join(row) + f' | {util} |')
EOF
