#!/usr/bin/env bash
# Builds the fuzz preset and runs every libFuzzer target for FUZZ_SECONDS
# (default 60) each, one after the other. Used by `make fuzz` and .ci/run.
# Installs clang and libFuzzer first (scripts/install-fuzz-deps.sh).
#   FUZZ_SECONDS=20 bash scripts/fuzz.sh            # every target
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh csv idx   # some targets
#   FUZZ_TIMEOUT=3 ...   # seconds one input may take (default 1)
# Per target: the seed corpus is tests/fuzz/corpus/<target>/ (read only); new
# inputs go to build/fuzz/corpus/<target>/; a crash is written to
# build/fuzz/artifacts/<target>/ and the script exits 1 after the other
# targets ran. The last lines of each run (execs, cov, rss) are printed and
# kept in build/fuzz/logs/<target>.log. Limits: inputs up to 64 KB, 1 s per
# input, 512 MB per allocation, 2 GB RSS; leaks fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${FUZZ_SECONDS:-60}"
JOBS="${JOBS:-2}"
ALL=(idx idx_gz cifar10 csv libsvm config model npy npz checkpoint_manifest server_state)
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then TARGETS=("${ALL[@]}"); fi

bash scripts/install-deps.sh
bash scripts/install-fuzz-deps.sh
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$JOBS"

declare -A DICT=([csv]=csv [libsvm]=libsvm [config]=toml)
# A small ASan quarantine: recycling the default 256 MB one stalled single
# inputs past the timeout on a loaded machine (docs/fuzzing.md).
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=16}"
failed=()
for t in "${TARGETS[@]}"; do
  work=build/fuzz/corpus/$t
  art=build/fuzz/artifacts/$t
  log=build/fuzz/logs/$t.log
  mkdir -p "$work" "$art" "$(dirname "$log")"
  args=(-max_len=65536 -timeout="${FUZZ_TIMEOUT:-1}" -malloc_limit_mb=512 -rss_limit_mb=2048
        -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1
        -artifact_prefix="$art/")
  if [ -n "${DICT[$t]:-}" ]; then args+=(-dict="tests/fuzz/${DICT[$t]}.dict"); fi
  echo "== fuzz $t for ${SECONDS_PER_TARGET}s"
  if build/fuzz/tests/fuzz/fuzz_"$t" "${args[@]}" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    grep -E '^#[0-9]+ +(DONE|pulse)|^Done|stat::(number_of_executed_units|peak_rss_mb)' "$log" |
      tail -3
  else
    failed+=("$t")
    echo "fuzz $t FAILED (input saved under $art/); the end of $log:"
    tail -40 "$log"
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#TARGETS[@]} targets ran ${SECONDS_PER_TARGET}s each, no crash"
