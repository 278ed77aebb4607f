#!/usr/bin/env bash
# Installs what the `fuzz` preset needs on top of scripts/install-deps.sh:
# clang and libFuzzer (Debian's clang 14). Called by `make fuzz` only, never by
# `make demo` / `make test`. Idempotent: skips apt when all are present; uses
# sudo when not root; waits up to 15 minutes for another apt/dpkg to finish.
set -euo pipefail
PKGS=(clang libfuzzer-14-dev libclang-rt-14-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-fuzz-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-fuzz-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -o DPkg::Lock::Timeout=900)
$SUDO "${APT[@]}" update
$SUDO "${APT[@]}" install -y --no-install-recommends "${missing[@]}"
