#!/usr/bin/env bash
# docs/index.md, the site's front page, is README.md with its links made
# relative to docs/ (tests/docs/mkdocs_test.sh checks it is current):
#   scripts/docs-index.sh > docs/index.md
# The runnable markers are dropped (README.md's blocks are the ones run), and
# links to files outside docs/ become plain text or the Python page's URL.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "<!-- Generated from README.md by scripts/docs-index.sh. Do not edit. -->"
echo
sed -e 's|](docs/python\.md)|](python/)|g' \
    -e 's|(docs/|(|g' \
    -e 's|\[CHANGELOG\.md\](CHANGELOG\.md)|`CHANGELOG.md` (in the source tree)|g' \
    -e '/^<!-- run -->$/d' -e '/^<!-- skip: .* -->$/d' \
    -e 's|\[docs/python\.md\]|[the Python page]|' \
    README.md
