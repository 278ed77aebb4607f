#!/usr/bin/env bash
# Installs the Debian packages hsgd needs. Idempotent: skips apt entirely when
# every package is already installed. Uses sudo when not root.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config
      libtorch-dev libopenblas-dev libopenmpi-dev openmpi-bin
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libtomlplusplus-dev
      nlohmann-json3-dev libfmt-dev zlib1g-dev gnuplot-nox dataset-fashion-mnist)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
