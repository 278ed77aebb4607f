#!/usr/bin/env bash
# mpi-exchange.sh [RATE] [FLOATS] [STEPS]: the gossip exchange without hsgd,
# over emulated hosts (scripts/mpi-netns.sh, links of RATE, default 20mbit):
# raw TCP one-way and two-way between two hosts, then Open MPI's
# Isend/Irecv of FLOATS floats (default 61706, LeNet-5) one-way, two-way,
# on a 4-rank ring and on 4-rank one-peer exponential pairs, each in one
# message and in chunks of 16000 floats (within btl_tcp_eager_limit).
# docs/results-gossip.md, "Where the real time goes", reads these figures.
# Needs root, mpicc (libopenmpi-dev) and python3. Exits 77 (skip) without
# root or namespaces, like mpi-netns.sh.
set -euo pipefail
rate=${1:-20mbit} np=${2:-61706} steps=${3:-40}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_exchange" "$src/bench/net/mpi_exchange.c"
netns() { bash "$src/scripts/mpi-netns.sh" -r "$rate" "$@" 2>/dev/null; }
echo "links $rate; wire time of one message: $(awk -v n="$np" -v r="$rate" 'BEGIN {
  m = r; sub(/[a-z]+$/, "", m); u = r; sub(/^[0-9.]+/, "", u);
  f = u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : u == "kbit" ? 1e3 : 1;
  printf "%.1f ms", 4 * n * 8 / (m * f) * 1e3 }')"
for mode in oneway twoway; do
  netns -n 2 -w 1 -- -np 2 /usr/bin/python3 "$src/bench/net/tcp_exchange.py" 10.77.0.1 \
    $((4 * np)) "$steps" "$mode"
done
for chunk in "$np" 16000; do
  netns -n 2 -w 1 -- -np 2 "$tmp/mpi_exchange" "$np" "$steps" oneway "$chunk"
  netns -n 2 -w 1 -- -np 2 "$tmp/mpi_exchange" "$np" "$steps" twoway "$chunk"
  netns -n 5 -- -np 4 "$tmp/mpi_exchange" "$np" "$steps" ring "$chunk"
  netns -n 5 -- -np 4 "$tmp/mpi_exchange" "$np" "$steps" onepeer "$chunk"
done
