#!/usr/bin/env bash
# The documentation site builds with `mkdocs build --strict` (a broken link,
# a page missing from nav or a missing page fails). Exit 77 (CTest: skipped)
# without mkdocs (Debian's mkdocs, mkdocs-material; scripts/install-deps.sh).
set -euo pipefail
src=$1 out=$2
if ! command -v mkdocs >/dev/null; then
  echo "SKIPPED: mkdocs is not installed (apt-get install mkdocs mkdocs-material, or bash scripts/install-deps.sh)"
  exit 77
fi
cd "$src"
mkdocs build --strict --quiet --site-dir "$out"
echo "site built (--strict) in $out"
