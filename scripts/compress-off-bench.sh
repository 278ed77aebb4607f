#!/bin/sh
# Issue 14, "compression off costs nothing": the same jobs with two hsgd
# binaries, BEFORE (built from the commit before compression landed) and
# AFTER, alternated round by round so both see the same machine.
#   - sim: metrics.csv and model.bin must be byte for byte the same; the
#     process CPU seconds of each run are printed (median per binary).
#   - threads: samples/s of async with 2 workers (softmax: the cheapest
#     gradient, where a per-push cost would show most; LeNet-5), medians
#     per binary and the median of the per-round ratios AFTER / BEFORE.
# Every sim cost is set (nothing calibrated), so both binaries simulate the
# same cluster.
# Usage: scripts/compress-off-bench.sh BEFORE_BIN AFTER_BIN [ROUNDS] [SECONDS]
# docs/benchmarks-history.md ("Compression off costs nothing") builds the two binaries:
#   git worktree add --detach /tmp/wt-before 4ff7a18
#   (cd /tmp/wt-before && cmake --preset release -DHSGD_BUILD_TESTS=OFF &&
#    cmake --build --preset release --target hsgd)
set -eu
BEFORE=$1
AFTER=$2
ROUNDS=${3:-5}
SECONDS_=${4:-4}
OUT=$(mktemp -d /tmp/hsgd-compress-off.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
FM=fashion-mnist

# One run; prints "samples_per_s cpu_s" from summary.json and /proc times.
run() {
  bin=$1; dir=$2; shift 2
  /usr/bin/time -f '%U %S' -o "$dir.time" "$bin" train --quiet --out "$dir" "$@" > /dev/null
  sps=$(sed -n 's/^  "samples_per_s": \([0-9.e+]*\),*$/\1/p' "$dir/summary.json")
  cpu=$(awk '{print $1 + $2}' "$dir.time")
  echo "$sps $cpu"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

SIM_SOFTMAX="--runtime sim --data $FM --model softmax --policy hybrid --workers 16 --budget 3
  --set sim.compute_time=0.0002 --set stragglers.sigma=0.0002 --set sim.threads=1
  --set sim.server_ns_per_param=0.5 --eval-every 0.5"
SIM_LENET="--runtime sim --data $FM --model lenet5 --policy kasync:4 --workers 8 --budget 0.6
  --set sim.compute_time=0.005 --set stragglers.sigma=0.005 --set sim.threads=1
  --set sim.server_ns_per_param=0.5 --eval-every 0.2"
THR_SOFTMAX="--data $FM --model softmax --policy async --workers 2 --budget $SECONDS_ --eval-every 1000"
THR_LENET="--data $FM --model lenet5 --policy async --workers 2 --budget $SECONDS_ --eval-every 1000"

echo "compression off: $BEFORE (before) against $AFTER (after), $ROUNDS rounds"
for job in SIM_SOFTMAX SIM_LENET THR_SOFTMAX THR_LENET; do
  eval "args=\$$job"
  : > "$OUT/$job.before"; : > "$OUT/$job.after"; : > "$OUT/$job.ratio"
  r=1
  while [ "$r" -le "$ROUNDS" ]; do
    # shellcheck disable=SC2086
    b=$(run "$BEFORE" "$OUT/$job-b$r" $args)
    # shellcheck disable=SC2086
    a=$(run "$AFTER" "$OUT/$job-a$r" $args)
    echo "$b" >> "$OUT/$job.before"
    echo "$a" >> "$OUT/$job.after"
    case $job in
      SIM_*)
        for f in metrics.csv model.bin; do
          cmp -s "$OUT/$job-b$r/$f" "$OUT/$job-a$r/$f" ||
            { echo "$job round $r: $f differs between the binaries" >&2; exit 1; }
        done ;;
      *) echo "$a $b" | awk '{print $1 / $3}' >> "$OUT/$job.ratio" ;;
    esac
    r=$((r + 1))
  done
  bs=$(cut -d' ' -f1 "$OUT/$job.before" | median); as=$(cut -d' ' -f1 "$OUT/$job.after" | median)
  bc=$(cut -d' ' -f2 "$OUT/$job.before" | median); ac=$(cut -d' ' -f2 "$OUT/$job.after" | median)
  case $job in
    SIM_*) printf '%-12s metrics.csv, model.bin identical in %d rounds; cpu s before %s after %s\n' \
             "$job" "$ROUNDS" "$bc" "$ac"
           printf '%-12s   per round, cpu s before: %s; after: %s\n' "" \
             "$(cut -d' ' -f2 "$OUT/$job.before" | tr '\n' ' ')" "$(cut -d' ' -f2 "$OUT/$job.after" | tr '\n' ' ')" ;;
    *) printf '%-12s samples/s before %s after %s; after/before (median of rounds) %s\n' \
         "$job" "$bs" "$as" "$(median < "$OUT/$job.ratio")"
       printf '%-12s   per round, after/before: %s\n' "" "$(tr '\n' ' ' < "$OUT/$job.ratio")" ;;
  esac
done
