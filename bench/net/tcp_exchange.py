#!/usr/bin/env python3
"""The same exchange over one plain TCP connection (no MPI): two processes,
rank 0 listening; every step each sends BYTES to the other (twoway) or rank
0 to rank 1 only (oneway), then a 1-byte handshake. Prints the median step
time in ms. Run by scripts/mpi-exchange.sh under mpirun (for the placement
on the emulated hosts only; OMPI_COMM_WORLD_RANK names the rank).
Usage: tcp_exchange.py PEER_ADDR BYTES STEPS oneway|twoway"""
import os
import socket
import statistics
import sys
import threading
import time

peer, nbytes, steps, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
if rank == 0:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 5555))
    listener.listen(1)
    s, _ = listener.accept()
else:
    for _ in range(200):
        try:
            s = socket.create_connection((peer, 5555))
            break
        except OSError:
            time.sleep(0.05)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
payload = b"x" * nbytes


def receive(n):
    got = 0
    while got < n:
        d = s.recv(min(1 << 20, n - got))
        if not d:
            sys.exit("tcp_exchange: the peer closed the connection")
        got += len(d)


times = []
for _ in range(steps):
    t0 = time.perf_counter()
    sends = mode == "twoway" or rank == 0
    receives = mode == "twoway" or rank == 1
    sender = threading.Thread(target=s.sendall, args=(payload,)) if sends else None
    if sender:
        sender.start()
    if receives:
        receive(nbytes)
    if sender:
        sender.join()
    s.sendall(b"b")
    receive(1)
    times.append(time.perf_counter() - t0)
if rank == 0:
    print(f"tcp {mode}, {nbytes} bytes: {1e3 * statistics.median(times):.1f} ms per step "
          f"(median of {steps})")
