#!/usr/bin/env bash
# install-python.sh BUILD VENV: installs the hsgd package built in BUILD
# (BUILD/python/hsgd: the module and the Python files; BUILD/hsgd: the CLI,
# for hsgd.sweep) into the virtual environment VENV, made first if missing
# with Debian's /usr/bin/python3 and --system-site-packages (so numpy, torch,
# pytest, pandas and matplotlib are Debian's: no second libtorch). Offline.
set -euo pipefail
build=$1
venv=$2
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
rm -rf "$site/hsgd"
cp -r "$build/python/hsgd" "$site/hsgd"
mkdir -p "$site/hsgd/bin"
cp "$build/hsgd" "$site/hsgd/bin/hsgd"
"$venv/bin/python" -c 'import hsgd; print("hsgd", hsgd.__version__, "installed in", hsgd.__file__)'
echo "use it with: $venv/bin/python (or: source $venv/bin/activate)"
