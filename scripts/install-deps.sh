#!/usr/bin/env bash
# Installs the Debian packages hsgd needs (scripts/apt-ensure.sh: idempotent,
# sudo when not root).
set -euo pipefail
exec bash "$(dirname "$0")/apt-ensure.sh" install-deps \
  build-essential cmake ninja-build pkg-config \
  libtorch-dev libopenblas-dev libopenmpi-dev openmpi-bin \
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libtomlplusplus-dev \
  nlohmann-json3-dev libfmt-dev zlib1g-dev libisal-dev gnuplot-nox dataset-fashion-mnist \
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-torch python3-pytest \
  python3-venv python3-setuptools python3-wheel python3-pandas python3-matplotlib python3-tqdm \
  mkdocs mkdocs-material
