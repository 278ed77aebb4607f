#!/usr/bin/env bash
# Installs what the `fuzz` preset needs on top of scripts/install-deps.sh:
# clang and libFuzzer (Debian's clang 14). Called by `make fuzz` only, never by
# `make demo` / `make test`.
set -euo pipefail
exec bash "$(dirname "$0")/apt-ensure.sh" install-fuzz-deps clang libfuzzer-14-dev libclang-rt-14-dev
