#!/usr/bin/env bash
# Every example config under examples/ loads and validates: a config with
# `hsgd config --config FILE`, a sweep grid (a file with [axes]) with
# `hsgd sweep FILE --check` (the grid and every run's config, nothing run).
set -euo pipefail
hsgd=$1 src=$2
n=0 failed=0
while IFS= read -r f; do
  if grep -q '^\[axes\]' "$f"; then
    cmd=("$hsgd" sweep "$f" --check --out "$(mktemp -d)/sweep")
  else
    cmd=("$hsgd" config --config "$f")
  fi
  if "${cmd[@]}" >/dev/null 2>"${TMPDIR:-/tmp}/examples_test.err"; then
    echo "ok    ${f#$src/}"
  else
    echo "FAIL  ${f#$src/}: $(cat "${TMPDIR:-/tmp}/examples_test.err")"
    failed=$((failed + 1))
  fi
  n=$((n + 1))
done < <(find "$src/examples" -name '*.toml' | sort)
echo "$n example configs, $failed failed"
[[ $n -gt 0 && $failed -eq 0 ]]
