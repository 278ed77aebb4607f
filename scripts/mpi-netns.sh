#!/usr/bin/env bash
# mpi-netns.sh [-n HOSTS] [-r RATE] [-R SERVER_RATE] [-b BURST] [-s SERVER_SLOTS]
#              [-w WORKER_SLOTS] [-S STATS_FILE] -- MPIRUN-ARGS...
#
# Runs `mpirun MPIRUN-ARGS...` across HOSTS emulated hosts on this machine
# (default 2): each host is a network namespace of its own (hostname hosta,
# hostb, ...; address 10.77.0.1, 10.77.0.2, ...) with one veth into a bridge
# in a "switch" namespace, and Open MPI's TCP transport only (--mca btl
# tcp,self). mpirun runs on hosta and reaches the others through an rsh agent
# that enters their namespaces (nsenter) instead of ssh.
#
# Slots: hosta holds SERVER_SLOTS ranks (default 1) and every other host
# WORKER_SLOTS (default 1; 2 when HOSTS is 2, the original two-host layout),
# in rank order, so with the defaults rank 0 (the server) is alone on hosta.
#
# -r RATE limits every host's link (tc tbf, e.g. 100mbit) in both directions:
# the host's egress on its own end of the veth, its ingress on the switch's
# end. -R SERVER_RATE sets hosta's link apart (default RATE). -b BURST is the
# token bucket's depth (default 64kb: a deeper bucket lets a host that was
# computing send its next message at veth speed, which is not what a rate-
# limited link does). -S STATS_FILE: after mpirun, one line per host,
# `HOST TX_BYTES RX_BYTES`, the bytes its link carried (tc's counts, headers
# included). HSGD_NETNS_SYSCTL="KEY=VALUE ..." sets those sysctls in every
# host's namespace (e.g. net.ipv4.tcp_slow_start_after_idle=0, which
# docs/results-gossip.md measures). Nothing outside the namespaces changes: they live as
# long as this script.
#
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), unshare, nsenter and ip (and tc
# for -r/-R) from util-linux and iproute2. Exits 77 (a CTest skip) when the
# namespaces cannot be made, with one line saying why; 2 on bad arguments.
set -euo pipefail
hosts=2 rate="" srate="" burst=64kb aslots=1 bslots="" stats=""
usage() {
  echo "usage: $0 [-n HOSTS] [-r RATE] [-R SERVER_RATE] [-b BURST] [-s N] [-w N] [-S FILE] -- MPIRUN-ARGS..." >&2
  exit 2
}
while getopts "n:r:R:b:s:w:S:" o; do
  case $o in
    n) hosts=$OPTARG ;;
    r) rate=$OPTARG ;;
    R) srate=$OPTARG ;;
    b) burst=$OPTARG ;;
    s) aslots=$OPTARG ;;
    w) bslots=$OPTARG ;;
    S) stats=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ "$hosts" =~ ^[0-9]+$ ]] && ((hosts >= 2 && hosts <= 26)) ||
  { echo "mpi-netns: -n HOSTS: expected 2 to 26, got '$hosts'" >&2; exit 2; }
[[ "$aslots" =~ ^[0-9]+$ ]] && ((aslots >= 1)) ||
  { echo "mpi-netns: -s: expected a positive number of slots, got '$aslots'" >&2; exit 2; }
[[ -n "$bslots" ]] || { ((hosts == 2)) && bslots=2 || bslots=1; }
[[ "$bslots" =~ ^[0-9]+$ ]] && ((bslots >= 1)) ||
  { echo "mpi-netns: -w: expected a positive number of slots, got '$bslots'" >&2; exit 2; }
[[ -n "$srate" ]] || srate=$rate
skip() { echo "mpi-netns: cannot run $hosts network namespaces here: $*" >&2; exit 77; }

if [[ "${HSGD_NETNS_INNER:-}" != 1 ]]; then
  [[ $(id -u) == 0 ]] || skip "needs root"
  for t in unshare nsenter ip mpirun; do command -v $t >/dev/null || skip "no $t"; done
  [[ -z "$rate$srate" ]] || command -v tc >/dev/null || skip "no tc (for -r/-R)"
  unshare --net --uts true 2>/dev/null || skip "unshare --net --uts failed (no CAP_SYS_ADMIN?)"
  args=(-n "$hosts" -s "$aslots" -w "$bslots" -b "$burst")
  [[ -z "$rate" ]] || args+=(-r "$rate")
  [[ -z "$srate" ]] || args+=(-R "$srate")
  [[ -z "$stats" ]] || args+=(-S "$(realpath -m "$stats")")
  exec env HSGD_NETNS_INNER=1 unshare --net --uts "$0" "${args[@]}" -- "$@"
fi

# Here: the switch's namespaces. Each host's are held by a sleeping process.
hostname switch
ip link set lo up
ip link add br0 type bridge || skip "cannot create a bridge"
ip link set br0 up
tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
letters=(a b c d e f g h i j k l m n o p q r s t u v w x y z)
hostlist=""
for ((h = 1; h <= hosts; ++h)); do
  unshare --net --uts sleep 1000000 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 50); do
    [[ $(readlink /proc/$pid/ns/net) != $(readlink /proc/self/ns/net) ]] && break
    sleep 0.02
  done
  name=host${letters[h - 1]} addr=10.77.0.$h
  ip link add "s$h" type veth peer name "h$h" || skip "cannot create a veth pair"
  ip link set "h$h" netns "$pid"
  ip link set "s$h" master br0
  ip link set "s$h" gso_max_size 16384
  ip link set "s$h" up
  nsenter -t "$pid" -n -u sh -c "hostname $name; ip link set lo up;
    ip link set h$h name eth0; ip link set eth0 gso_max_size 16384; ip addr add $addr/24 dev eth0; ip link set eth0 up"
  for kv in ${HSGD_NETNS_SYSCTL:-}; do
    nsenter -t "$pid" -n sysctl -q -w "$kv" || skip "sysctl -w $kv failed"
  done
  r=$rate
  ((h == 1)) && r=$srate
  if [[ -n "$r" ]]; then
    tc qdisc add dev "s$h" root tbf rate "$r" burst "$burst" latency 50ms
    nsenter -t "$pid" -n tc qdisc add dev eth0 root tbf rate "$r" burst "$burst" latency 50ms
  fi
  slots=$bslots
  ((h == 1)) && slots=$aslots
  hostlist+="${hostlist:+,}$addr:$slots"
  echo "$addr) exec nsenter -t $pid -n -u -- /bin/sh -c \"\$*\" ;;" >>"$tmp/cases"
done
# Open MPI's rsh agent: `agent HOST COMMAND...` runs COMMAND on HOST.
{
  echo '#!/bin/sh'
  echo 'host=$1; shift'
  echo 'case $host in'
  cat "$tmp/cases"
  echo '*) echo "mpi-netns agent: unknown host $host" >&2; exit 1 ;;'
  echo 'esac'
} >"$tmp/agent"
chmod +x "$tmp/agent"
# mpirun in the background, so that SIGTERM, SIGINT or SIGHUP to this script
# (hsgd fidelity sends SIGTERM when it dies) reaches it at once: it passes
# the signal to its ranks and ends, then the EXIT trap clears the hosts.
# (In the foreground bash would wait for mpirun to finish the job first.)
rc=0
nsenter -t "${pids[0]}" -n -u -- mpirun --allow-run-as-root --host "$hostlist" \
  --mca plm_rsh_agent "$tmp/agent" --mca btl tcp,self \
  --mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 "$@" &
mpi=$!
trap 'kill -TERM "$mpi" 2>/dev/null || true' TERM INT HUP
wait "$mpi" || rc=$?
while kill -0 "$mpi" 2>/dev/null; do wait "$mpi" || rc=$?; done
if [[ -n "$stats" ]]; then
  # The switch's end of host h's veth: its tx is the host's rx and back.
  # (/proc/net/dev: this namespace's counters; /sys is the parent's mount.)
  for ((h = 1; h <= hosts; ++h)); do
    awk -v dev="s$h:" -v name="host${letters[h - 1]}" \
      '$1 == dev { print name, $2, $10 }' /proc/net/dev
  done >"$stats"
fi
exit $rc
