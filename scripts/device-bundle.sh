#!/usr/bin/env bash
# Packs, from a build made here, what a lent GPU machine needs to run Loom's GPU tests of the
# suite (scripts/device-check.sh runs them when the bundle travels with the tree): the `loom`
# program and its libraries, the test programs that hold GPU tests, the Debian libraries they
# load (the lent machine has none of Debian's packages; it has torch 2.11.0+cu130, the version
# built against here), and the text the language-model tests tokenize; about 17 MB as xz. Usage:
#   scripts/device-bundle.sh [BUILD_DIR]      writes device-bundle/bundle.tar.xz (ignored by git)
# then carry `device-bundle` with the device run. The programs keep the paths they were built
# with; device-check.sh unpacks the bundle and makes those paths exist there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
bundle=$(mktemp -d)
trap 'rm -rf "$bundle"' EXIT
torch_lib=$(dirname "$(readlink -f "$(ls "$root"/.venv/lib/python3*/site-packages/torch/lib/libtorch_cpu.so)")")

mkdir -p "$bundle/build/bin" "$bundle/build/src" "$bundle/build/lib" "$bundle/build/tests" \
  "$bundle/lib" "$bundle/share"
cp -a "$build/bin/loom" "$bundle/build/bin/"
cp -a "$build"/src/libloom*.so* "$bundle/build/src/"
cp -a "$build"/lib/*.so "$bundle/build/lib/"
# The test programs with GPU tests (they skip, saying why, where there is no GPU).
for program in models_test dist_test e2e_test; do cp -a "$build/tests/$program" "$bundle/build/tests/"; done
find "$bundle/build" -type f -exec strip --strip-unneeded {} +

# Every library the programs load that is neither torch's (the lent machine has its own, the same
# version) nor the C and C++ runtime's (its newer ones serve older programs). A library torch
# also ships stays out: a copy on LD_LIBRARY_PATH would be found before torch's own.
is_system() {
  case "$(basename "$1")" in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libstdc++.so* | \
      libgcc_s.so* | libresolv.so*) return 0 ;;
  esac
  return 1
}
for program in "$bundle"/build/bin/loom "$bundle"/build/src/*.so* "$bundle"/build/lib/*.so \
  "$bundle"/build/tests/*; do
  ldd "$program" | awk '/=> \// {print $3}'
done | sort -u | while read -r library; do
  if is_system "$library" || [[ "$library" == "$torch_lib"/* || "$library" == "$build"/* ]]; then
    continue
  fi
  [[ -e "$torch_lib/$(basename "$library")" ]] && continue
  cp -L "$library" "$bundle/lib/"
done

jargon=/usr/share/doc/jargon-text/jargon.txt.gz
[[ -f "$jargon" ]] && cp "$jargon" "$bundle/share/"
{
  echo "built_in=$root"
  echo "build=$build"
  echo "torch_lib=$torch_lib"
  echo "commit=$(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet || echo +changes)"
} > "$bundle/BUILT"

# Closure: with the bundle first on the path, nothing is left to find outside it, torch's folder,
# the build folder (device-check.sh links it to the bundle's) and the C and C++ runtime.
missing=0
for program in "$bundle"/build/bin/loom "$bundle"/build/src/*.so* "$bundle"/build/tests/*; do
  while read -r library; do
    if ! is_system "$library" && [[ "$library" != "$bundle"/* && "$library" != "$torch_lib"/* &&
      "$library" != "$build"/* ]]; then
      echo "device-bundle: $(basename "$program") loads $library from outside the bundle" >&2
      missing=1
    fi
  done < <(LD_LIBRARY_PATH="$bundle/lib" ldd "$program" | awk '/=> \// {print $3}')
done
[[ $missing == 0 ]] || exit 1
rm -rf "$root/device-bundle"
mkdir -p "$root/device-bundle"
cp "$bundle/BUILT" "$root/device-bundle/"
tar -C "$bundle" -cJf "$root/device-bundle/bundle.tar.xz" .
echo "device-bundle: $(du -sh "$bundle" | cut -f1) ($(ls "$bundle/lib" | wc -l) libraries)," \
  "$(du -h "$root/device-bundle/bundle.tar.xz" | cut -f1) packed in $root/device-bundle"
