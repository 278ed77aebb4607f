#!/usr/bin/env bash
# The random held-out families of issue 32 (examples/sweep/random/) are what
# scripts/random-families.py draws from their seeds: results-auto.md says
# the command redraws the same files, and a family edited by hand after it
# ran would no longer be the draw that was committed before it ran.
set -euo pipefail
src=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# random-SEED-NN: the declared distribution; shift-SEED-NN: drawn with --shift
draws=$(ls "$src/examples/sweep/random" | sed -n 's/^\(random\|shift\)-\([0-9]*\)-[0-9]*\.toml$/\1-\2/p' | sort -u)
[[ -n $draws ]] || { echo "no random families in $src/examples/sweep/random"; exit 1; }
for draw in $draws; do
  seed=${draw#*-}
  count=$(ls "$src/examples/sweep/random" | grep -c "^$draw-")
  # the draw's other flags (--rules, --shift), as its first file's header names them
  flags=$(sed -n "s/^# scripts\/random-families.py --seed $seed\(.*\) and committed.*/\1/p" \
    "$src/examples/sweep/random/$draw-01.toml")
  # shellcheck disable=SC2086
  /usr/bin/python3 "$src/scripts/random-families.py" --seed "$seed" --count "$count" --out "$out" $flags >/dev/null
done
diff -r "$out" "$src/examples/sweep/random"
echo "the random families $(echo $draws) are their draws"
