#!/usr/bin/env bash
# apt-ensure.sh LABEL PKG...: installs the Debian packages PKG... that are not
# installed yet, with `apt-get install --no-install-recommends` after
# `apt-get update`. Idempotent: skips apt entirely when every package is
# present. Uses sudo when not root; waits up to 15 minutes for another
# apt/dpkg to finish. The one installer behind install-deps.sh,
# install-fuzz-deps.sh and any optional tool's make target.
set -euo pipefail
label=$1
shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$label: all $# packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "$label: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -o DPkg::Lock::Timeout=900)
$SUDO "${APT[@]}" update
$SUDO "${APT[@]}" install -y --no-install-recommends "${missing[@]}"
