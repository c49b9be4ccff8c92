#!/usr/bin/env bash
# Lets the Python the build was made for (LOOM_PYTHON: the project's .venv by default) import the
# `loom` package from a build tree, as `pip install -e` would: a loom-build.pth file in its
# site-packages folder names BUILD/python. `make demo` and `make test` run it after building;
# `cmake --install` installs a copy instead. Usage: scripts/link-python.sh [BUILD]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
python=$(sed -n 's/^LOOM_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [ -z "$python" ]; then
  echo "link-python: $build was configured without LOOM_PYTHON"
  exit 0
fi
if [ ! -f "$build/python/loom/__init__.py" ]; then
  echo "link-python: no loom package in $build/python (built with LOOM_BUILD_PYTHON=OFF?)"
  exit 0
fi
site=$("$python" -c 'import site; print(site.getsitepackages()[0])')
pth="$site/loom-build.pth"
if [ "$(cat "$pth" 2>/dev/null)" = "$build/python" ]; then exit 0; fi
# A system Python's site-packages may belong to root; a virtual environment's is the user's.
sudo_cmd=()
if [ ! -w "$(dirname "$site")" ] && [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" mkdir -p "$site"
echo "$build/python" | "${sudo_cmd[@]}" tee "$pth" > /dev/null
echo "link-python: $python imports loom from $build/python ($pth)"
