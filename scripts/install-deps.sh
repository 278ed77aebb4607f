#!/usr/bin/env bash
# Installs the Debian packages hsgd needs (scripts/apt-ensure.sh: idempotent,
# sudo when not root).
set -euo pipefail
exec bash "$(dirname "$0")/apt-ensure.sh" install-deps \
  build-essential cmake ninja-build pkg-config \
  libtorch-dev libopenblas-dev libopenmpi-dev openmpi-bin \
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libtomlplusplus-dev \
  nlohmann-json3-dev libfmt-dev zlib1g-dev gnuplot-nox dataset-fashion-mnist \
  mkdocs mkdocs-material
