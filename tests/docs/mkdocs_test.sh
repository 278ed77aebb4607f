#!/usr/bin/env bash
# The documentation site builds with `mkdocs build --strict` (a broken link,
# a page missing from nav or a missing page fails), and every #anchor of its
# links exists (check_anchors.py). Exit 77 (CTest: skipped)
# without mkdocs (Debian's mkdocs, mkdocs-material; scripts/install-deps.sh).
# First: README.md has at most 300 lines, and docs/index.md is README.md as
# scripts/docs-index.sh writes it.
set -euo pipefail
src=$1 out=$2
cd "$src"
lines=$(wc -l < README.md)
if ((lines > 300)); then
  echo "README.md has $lines lines; at most 300 (the rest belongs in docs/)" >&2
  exit 1
fi
if ! diff -u docs/index.md <(bash scripts/docs-index.sh); then
  echo "docs/index.md is stale: scripts/docs-index.sh > docs/index.md" >&2
  exit 1
fi
if ! command -v mkdocs >/dev/null; then
  echo "SKIPPED: mkdocs is not installed (apt-get install mkdocs mkdocs-material, or bash scripts/install-deps.sh)"
  exit 77
fi
mkdocs build --strict --quiet --site-dir "$out"
echo "site built (--strict) in $out"
python3 "$(dirname "$0")/check_anchors.py" "$out"
