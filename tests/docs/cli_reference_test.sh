#!/usr/bin/env bash
# docs/cli-reference.md is `hsgd help-markdown` (the CLI's own declaration of
# its options, src/hsgd/cli/main.cc). Regenerate:
#   build/release/hsgd help-markdown > docs/cli-reference.md
set -euo pipefail
hsgd=$1 src=$2
if ! diff -u "$src/docs/cli-reference.md" <("$hsgd" help-markdown); then
  echo "docs/cli-reference.md is stale: build/release/hsgd help-markdown > docs/cli-reference.md" >&2
  exit 1
fi
echo "docs/cli-reference.md is current"
