#!/usr/bin/env python3
"""The first evaluation at which each run reaches a test accuracy.

usage: time-to-target.py TARGET RUN_DIR...   (TARGET a fraction, e.g. 0.7285,
or 'final-1pp:DIR': the final test_acc of DIR's metrics.csv minus 0.01)

Prints, per run, the virtual (or wall) time_s, epoch and updates of the first
row of metrics.csv whose test_acc >= TARGET, or 'never'. Columns are found by
their header names.
"""
import csv
import sys


def rows(run):
    with open(run + "/metrics.csv") as f:
        return list(csv.DictReader(f))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    target = sys.argv[1]
    if target.startswith("final-1pp:"):
        target = float(rows(target.split(":", 1)[1])[-1]["test_acc"]) - 0.01
    else:
        target = float(target)
    print(f"target test_acc {target:.4f}")
    print("| run | time_s | epoch | updates | final test_acc |")
    print("|---|---:|---:|---:|---:|")
    for run in sys.argv[2:]:
        rs = rows(run)
        hit = next((r for r in rs if float(r["test_acc"]) >= target), None)
        final = float(rs[-1]["test_acc"])
        if hit:
            print(f"| {run} | {float(hit['time_s']):.1f} | {float(hit['epoch']):.2f} | "
                  f"{hit['updates']} | {final:.4f} |")
        else:
            print(f"| {run} | never | | | {final:.4f} |")


if __name__ == "__main__":
    main()
