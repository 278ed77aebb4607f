#!/usr/bin/env bash
# `hsgd --version` prints the version of CMakeLists.txt's project(VERSION), and
# CHANGELOG.md's latest entry ("## [X.Y.Z] - date") is that version.
set -euo pipefail
hsgd=$1 src=$2
printed=$("$hsgd" --version)
cmake_version=$(sed -n 's/^project(hsgd VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
changelog=$(sed -n 's/^## \[\([0-9][0-9.]*\)\].*/\1/p' "$src/CHANGELOG.md" | head -n 1)
echo "hsgd --version: '$printed'; CMakeLists.txt: '$cmake_version'; CHANGELOG.md latest: '$changelog'"
[[ -n $cmake_version ]] || { echo "no project(hsgd VERSION ...) in CMakeLists.txt" >&2; exit 1; }
[[ $printed == "hsgd $cmake_version" ]] || { echo "hsgd --version does not print the CMake version" >&2; exit 1; }
[[ $changelog == "$cmake_version" ]] || { echo "CHANGELOG.md's latest entry is not $cmake_version" >&2; exit 1; }
# pyproject.toml's version (pip's metadata) is the same.
pyproject=$(sed -n 's/^version = "\([0-9.]*\)"/\1/p' "$src/pyproject.toml")
[[ $pyproject == "$cmake_version" ]] || { echo "pyproject.toml's version '$pyproject' is not $cmake_version" >&2; exit 1; }
