#!/usr/bin/env bash
# mpi-netns.sh [-r RATE] [-s SERVER_SLOTS] [-w WORKER_SLOTS] -- MPIRUN-ARGS...
#
# Runs `mpirun MPIRUN-ARGS...` across two "hosts" on this machine: two
# network namespaces (hosta, 10.77.0.1, and hostb, 10.77.0.2; their own
# hostnames too) joined by a veth pair, with Open MPI's TCP transport only
# (--mca btl tcp,self) over the veth. mpirun and the first SERVER_SLOTS
# ranks (default 1) run on hosta, the next WORKER_SLOTS (default 2) on
# hostb, reached through an rsh agent that enters hostb's namespaces
# (nsenter) instead of ssh. -r RATE limits the veth to RATE (tc tbf, e.g.
# 1gbit) in both directions. Nothing outside the two namespaces changes:
# they live as long as this script.
#
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), unshare, nsenter and ip (and tc
# for -r) from util-linux and iproute2. Exits 77 (a CTest skip) when the
# namespaces cannot be made, with one line saying why.
set -euo pipefail
rate="" aslots=1 bslots=2
while getopts "r:s:w:" o; do
  case $o in
    r) rate=$OPTARG ;;
    s) aslots=$OPTARG ;;
    w) bslots=$OPTARG ;;
    *) echo "usage: $0 [-r RATE] [-s N] [-w N] -- MPIRUN-ARGS..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
skip() { echo "mpi-netns: cannot run two network namespaces here: $*" >&2; exit 77; }

if [[ "${HSGD_NETNS_INNER:-}" != 1 ]]; then
  [[ $(id -u) == 0 ]] || skip "needs root"
  for t in unshare nsenter ip mpirun; do command -v $t >/dev/null || skip "no $t"; done
  [[ -z "$rate" ]] || command -v tc >/dev/null || skip "no tc (for -r)"
  unshare --net --uts true 2>/dev/null || skip "unshare --net --uts failed (no CAP_SYS_ADMIN?)"
  args=(-s "$aslots" -w "$bslots")
  [[ -z "$rate" ]] || args+=(-r "$rate")
  exec env HSGD_NETNS_INNER=1 unshare --net --uts "$0" "${args[@]}" -- "$@"
fi

# Here: hosta's namespaces. hostb's are held by a sleeping process.
hostname hosta
ip link set lo up
unshare --net --uts sleep 1000000 &
hostb=$!
tmp=$(mktemp -d)
trap 'kill $hostb 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do
  [[ $(readlink /proc/$hostb/ns/net) != $(readlink /proc/self/ns/net) ]] && break
  sleep 0.02
done
ip link add va type veth peer name vb || skip "cannot create a veth pair"
ip link set vb netns "$hostb"
ip addr add 10.77.0.1/24 dev va
ip link set va up
nsenter -t "$hostb" -n -u sh -c \
  'hostname hostb; ip link set lo up; ip addr add 10.77.0.2/24 dev vb; ip link set vb up'
if [[ -n "$rate" ]]; then
  tc qdisc add dev va root tbf rate "$rate" burst 1mb latency 50ms
  nsenter -t "$hostb" -n tc qdisc add dev vb root tbf rate "$rate" burst 1mb latency 50ms
fi
# Open MPI's rsh agent: `agent HOST COMMAND...` runs COMMAND on HOST.
cat >"$tmp/agent" <<AGENT
#!/bin/sh
shift
exec nsenter -t $hostb -n -u -- /bin/sh -c "\$*"
AGENT
chmod +x "$tmp/agent"
mpirun --allow-run-as-root --host "10.77.0.1:$aslots,10.77.0.2:$bslots" \
  --mca plm_rsh_agent "$tmp/agent" --mca btl tcp,self \
  --mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 "$@"
