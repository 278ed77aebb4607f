#!/usr/bin/env bash
# Every example config under examples/ loads and validates, in one process:
# `hsgd config --check FILE...` checks a config as `hsgd config --config` does
# and a sweep grid (a file with [axes]) as `hsgd sweep FILE --check` does (the
# grid and every run's config, nothing run), one stdout line per good file.
# (One process per file took 6.5 min under ASan: hsgd's start-up loads
# libtorch.)
set -euo pipefail
hsgd=$1 src=$2
mapfile -t files < <(find "$src/examples" -name '*.toml' | sort)
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
rc=0
"$hsgd" config --check "${files[@]}" >"$out" 2>"$err" || rc=$?
sed "s|$src/||" "$out"
grep -v '^hsgd: warning:' "$err" | sed "s|$src/||" || true
good=$(wc -l <"$out")
echo "${#files[@]} example configs, $good valid, exit $rc"
[[ ${#files[@]} -gt 0 && $rc -eq 0 && $good -eq ${#files[@]} ]]
