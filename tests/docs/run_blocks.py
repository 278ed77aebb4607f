#!/usr/bin/env python3
"""Docs that run: every shell block of README.md and docs/**/*.md marked
runnable is executed and must exit 0.

Marking (an HTML comment on the line before the fence, invisible on the site):

    <!-- run -->
    ```sh
    build/release/hsgd train --config examples/demo.toml --out runs/demo
    ```

    <!-- skip: needs a Slurm cluster -->
    ```sh
    ...
    ```

An unmarked block is illustration (not run). The test, not the docs, makes
each run tiny: every `hsgd train` and `hsgd compare` invocation (but not
`--resume`) gets `--set train.budget=1` inserted after its subcommand (a
`--set` overrides every flag, so `--budget 60` in the docs becomes 1 s,
virtual on the simulator); every `mpirun` gets `--allow-run-as-root
--oversubscribe`. The blocks of one page run in order in one scratch
directory holding `build/release/hsgd` (and `hsgd` on PATH), `examples/`,
`scripts/`, `bench/`, `tests/` and `docs/` of the source tree, so a page's later blocks may use
an earlier block's output. A block that exits 77 (what scripts/mpi-netns.sh
does where network namespaces cannot be made) counts as skipped.

    run_blocks.py HSGD SOURCE_DIR [--list] [--only PATH ...]
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

RUN = re.compile(r"^<!--\s*run\s*-->\s*$")
SKIP = re.compile(r"^<!--\s*skip:\s*(.+?)\s*-->\s*$")
FENCE = re.compile(r"^```(sh|bash|shell)\s*$")
HSGD_CMD = re.compile(r"((?:^|[\s/])hsgd\s+(?:train|compare))(?=\s|$)")
BUDGET = " --set train.budget=1"
BLOCK_TIMEOUT = 240


def blocks(path):
    """(line, kind, reason, body) of every marked shell block of a page."""
    lines = path.read_text().splitlines()
    out, prev, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            body = "\n".join(lines[start:j])
            if RUN.match(prev):
                out.append((start, "run", "", body))
            elif SKIP.match(prev):
                out.append((start, "skip", SKIP.match(prev).group(1), body))
            prev, i = "", j + 1
            continue
        if line.strip():
            prev = line.strip()
        i += 1
    return out


def tiny(body):
    """The block as the test runs it (see the module comment)."""
    logical, out = [], []
    for line in body.splitlines():
        logical.append(line)
        if line.rstrip().endswith("\\"):
            continue
        cmd = "\n".join(logical)
        logical = []
        if "--resume" not in cmd:
            cmd = HSGD_CMD.sub(lambda m: m.group(1) + BUDGET, cmd)
        if re.search(r"\bmpirun\s", cmd) and "--allow-run-as-root" not in cmd:
            cmd = re.sub(r"\bmpirun\s", "mpirun --allow-run-as-root --oversubscribe ", cmd, count=1)
        out.append(cmd)
    out.extend(logical)
    return "\n".join(out) + "\n"


def scratch(hsgd, src):
    d = pathlib.Path(tempfile.mkdtemp(prefix="hsgd-docs-"))
    (d / "build" / "release").mkdir(parents=True)
    os.symlink(os.path.abspath(hsgd), d / "build" / "release" / "hsgd")
    for name in ("examples", "scripts", "bench", "tests", "docs"):
        os.symlink(src / name, d / name)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hsgd")
    ap.add_argument("src")
    ap.add_argument("--list", action="store_true", help="print the blocks as they would run")
    ap.add_argument("--only", nargs="*", default=[], help="pages to run (paths relative to SRC)")
    a = ap.parse_args()
    src = pathlib.Path(a.src).resolve()
    pages = [src / "README.md"] + sorted((src / "docs").rglob("*.md"))
    if a.only:
        pages = [src / p for p in a.only]
    ran = skipped = failed = 0
    t0 = time.monotonic()
    for page in pages:
        found = blocks(page)
        if not found:
            continue
        rel = page.relative_to(src)
        work = None
        for line, kind, reason, body in found:
            where = f"{rel}:{line}"
            if kind == "skip":
                skipped += 1
                print(f"skip  {where}: {reason}", flush=True)
                continue
            script = tiny(body)
            if a.list:
                print(f"--- {where}\n{script}", end="")
                continue
            if work is None:
                work = scratch(a.hsgd, src)
            env = dict(os.environ)
            env["PATH"] = f"{work / 'build' / 'release'}:{env['PATH']}"
            start = time.monotonic()
            try:
                p = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
                rc = p.returncode
                tail = (p.stdout + p.stderr)[-3000:]
            except subprocess.TimeoutExpired as e:
                rc, tail = "timeout", str(e)
            took = time.monotonic() - start
            ran += 1
            if rc == 0:
                print(f"ok    {where} ({took:.1f} s)", flush=True)
            elif rc == 77:  # the environment cannot run it (e.g. no network namespaces)
                ran -= 1
                skipped += 1
                print(f"skip  {where}: exit 77, {tail.strip().splitlines()[-1] if tail.strip() else ''}",
                      flush=True)
            else:
                failed += 1
                print(f"FAIL  {where} (exit {rc}, {took:.1f} s)\n{script}--- output (tail)\n{tail}",
                      flush=True)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{ran} blocks run, {failed} failed, {skipped} skipped, {time.monotonic() - t0:.0f} s")
    if not a.list and ran == 0:
        print("no runnable blocks found (marker: <!-- run --> before a ```sh fence)")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
