#!/usr/bin/env bash
# docs/index.md, the site's front page, is README.md with its links made
# relative to docs/ (tests/docs/mkdocs_test.sh checks it is current):
#   scripts/docs-index.sh > docs/index.md
# The runnable markers are dropped (README.md's blocks are the ones run), and
# links to files outside docs/ become plain text.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "<!-- Generated from README.md by scripts/docs-index.sh. Do not edit. -->"
echo
sed -e 's|(docs/|(|g' \
    -e 's|\[CHANGELOG\.md\](CHANGELOG\.md)|`CHANGELOG.md` (in the source tree)|g' \
    -e '/^<!-- run -->$/d' -e '/^<!-- skip: .* -->$/d' \
    README.md
