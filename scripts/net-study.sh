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
PARAMS=${PARAMS:-61706}  # the model's parameters (LeNet-5), for the predictions
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

python3 - "$OUT" "$COMPUTE_TIME" "$LATENCY" "$BATCH" "$PARAMS" <<'EOF'
# The table: samples/s per worker count, then the arithmetic.
# plateau: the shards' links carry every update's bytes: S x C x batch /
#   bytes per update on the busier direction (async: the push, 4 P + 56, in
#   while the pulls, 4 P + 16, go out; with topk pushes the pull is the
#   larger; sync: everyone in step, pushes then pulls, so both directions
#   one after the other: 8 P + 72).
# knee: plateau / one worker's rate alone (batch / (compute + its pull and
#   push over its own link + 3 latencies)): where the line of n workers
#   alone meets the plateau.
# 90 % point: the workers that reach 90 % of the plateau: async, the line
#   until the plateau: 0.9 x knee; sync, n x batch / (n x bytes / (S C) +
#   compute + 3 latencies) = plateau x n / (n + knee): 9 x knee.
# measured 90 %: the fewest workers reaching 90 % of the 256-worker figure.
import json, os, sys, glob, re
out, compute, latency, batch, P = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
cells = {}
for f in glob.glob(os.path.join(out, '*', 'summary.json')):
    m = re.match(r'(.+)-s(\d+)-(.+)-w(\d+)$', os.path.basename(os.path.dirname(f)))
    if m:
        cells[(float(m[1]), int(m[2]), m[3], int(m[4]))] = json.load(open(f))
rates = sorted({k[0] for k in cells}, reverse=True)
shards_l = sorted({k[1] for k in cells})
policies = [p for p in ['sync', 'async', 'hybrid', 'async+topk'] if any(k[2] == p for k in cells)]
workers = sorted({k[3] for k in cells})
push, pull = 4 * P + 56, 4 * P + 16
topk_push = 56 + 22 + 8 * int(0.01 * P + 0.999999)
print('| link | shards | policy | ' + ' | '.join(f'{n} w' for n in workers) +
      ' | util at 256 | predicted plateau | knee | predicted 90 % | measured 90 % |')
print('|---|---|---|' + '---|' * len(workers) + '---|---|---|---|---|')
for rate in rates:
    for S in shards_l:
        for p in policies:
            row, util = [], ''
            for n in workers:
                s = cells.get((rate, S, p, n))
                row.append((f"{s['samples_per_s']:.0f}" + ('*' if s.get('stopped') else '')) if s else '')
                if s and n == max(workers) and 'network' in s:
                    util = f"{s['network']['busiest_util']:.2f}"
            up = topk_push if p == 'async+topk' else push
            per_update = (push + pull) if p == 'sync' else max(up, pull)
            plateau = S * rate * batch / per_update
            alone = batch / (compute + (up + pull) / rate + 3 * latency)
            knee = plateau / alone
            top = cells.get((rate, S, p, max(workers)))
            measured = ''
            if top:
                for n in workers:
                    s = cells.get((rate, S, p, n))
                    if s and s['samples_per_s'] >= 0.9 * top['samples_per_s']:
                        measured = str(n)
                        break
            link = f'{rate * 8 / 1e9:g} Gbit/s' if rate >= 1.25e8 else f'{rate * 8 / 1e6:g} Mbit/s'
            print(f'| {link} | {S} | {p} | ' + ' | '.join(row) +
                  f' | {util} | {plateau:.0f} | {knee:.1f} | {(9 if p == "sync" else 0.9) * knee:.0f} | {measured} |')
EOF
