#!/usr/bin/env bash
# mpi_tcp_test.sh HSGD SCRIPTS_DIR MODE: trains a small job on the mpi
# runtime (1 server + 2 workers, async, linear-test on the synthetic set,
# 2 epochs) over Open MPI's TCP transport only (--mca btl tcp,self), and
# checks that it learned and pushed every sample.
#   loopback:  one host, the ranks talk TCP over the loopback interface.
#   two-hosts: scripts/mpi-netns.sh: the server on one network namespace,
#              both workers on another, joined by a veth pair; first checks
#              that the ranks land on the two hosts. Exit 77 (skip) when
#              the namespaces cannot be made here.
#   four-hosts: scripts/mpi-netns.sh -n 4 -r 100mbit: 1 server + 3 workers, one
#              rank per host, each host's link rate-limited both ways (tc
#              tbf); checks that each rank lands on its own host.
set -euo pipefail
hsgd=$1 scripts=$2 mode=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
job=(train --quiet --runtime mpi --servers 1 --data synthetic --model linear-test --batch 16
     --lr 0.1 --policy async --epochs 2 --eval-every 1000 --set mpi.timeout=60 --out "$out/run")
case $mode in
  loopback)
    mpirun --allow-run-as-root --oversubscribe -np 3 --mca btl tcp,self "$hsgd" "${job[@]}" ;;
  two-hosts)
    rc=0
    hosts=$("$scripts/mpi-netns.sh" -- -np 3 hostname) || rc=$?
    [[ $rc == 0 ]] || exit $rc
    sorted=$(echo "$hosts" | sort | tr '\n' ' ')
    if [[ "$sorted" != "hosta hostb hostb " ]]; then
      echo "FAIL: ranks placed on '$sorted', expected rank 0 on hosta, 2 ranks on hostb"; exit 1
    fi
    "$scripts/mpi-netns.sh" -- -np 3 "$hsgd" "${job[@]}" ;;
  four-hosts)
    rc=0
    hosts=$("$scripts/mpi-netns.sh" -n 4 -r 100mbit -- -np 4 hostname) || rc=$?
    [[ $rc == 0 ]] || exit $rc
    sorted=$(echo "$hosts" | sort | tr '\n' ' ')
    if [[ "$sorted" != "hosta hostb hostc hostd " ]]; then
      echo "FAIL: ranks placed on '$sorted', expected one rank on each of hosta..hostd"; exit 1
    fi
    "$scripts/mpi-netns.sh" -n 4 -r 100mbit -- -np 4 "$hsgd" "${job[@]}" ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
# The last row: samples (column 3) >= 2 epochs of the training set, test
# accuracy (column 8) well above the first row's.
awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
  NR == 2 { acc0 = $col["test_acc"] }
  { samples = $col["samples"]; acc = $col["test_acc"]; rows = NR - 1 }
  END {
    printf "%d rows, samples %d, test_acc %.3f -> %.3f\n", rows, samples, acc0, acc
    if (samples < 2 * 8000) { print "FAIL: fewer samples than 2 epochs"; exit 1 }
    if (acc <= acc0 + 0.3) { print "FAIL: did not learn"; exit 1 }
  }' "$out/run/metrics.csv"
echo PASS
