#!/usr/bin/env bash
# Ferry installed like a library: `cmake --install` into a fresh prefix, then
# examples/consumer built against it with find_package(Ferry) and with
# pkg-config, each run under mpirun on the installed libferry.so; then the
# Debian package (cpack -G DEB) unpacked, its library running ferry-demo.
# Usage: consumer_test.sh <source dir> <build dir> <ferry-demo> (MPIRUN_ARGS: extra mpirun flags;
# MPICC and MPIRUN: the wrapper and launcher of the MPI Ferry was built against)
set -euo pipefail
source_dir=$1 build_dir=$2 demo=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
run() { "${MPIRUN:-mpirun}" --oversubscribe -np 2 ${MPIRUN_ARGS:-} "$@"; }

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
for f in lib/libferry.so include/ferry/ferry.h bin/ferry-info bin/ferry-bench lib/cmake/Ferry/FerryConfig.cmake \
         lib/pkgconfig/ferry.pc; do
  [[ -e $work/prefix/$f ]] || { echo "FAIL: $f not installed" >&2; exit 1; }
done

# find_package(Ferry) -> Ferry::ferry
cmake -S "$source_dir/examples/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DMPI_C_COMPILER="${MPICC:-mpicc}" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
out=$(run -x LD_LIBRARY_PATH="$work/prefix/lib" "$work/cmake-build/ferry-consumer")
grep -qx "No Errors" <<<"$out" || { echo "FAIL: consumer (CMake package): $out" >&2; exit 1; }
echo "consumer built with find_package(Ferry): No Errors"

# pkg-config
flags=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs ferry)
# shellcheck disable=SC2086
"${MPICC:-mpicc}" -o "$work/ferry-consumer-pc" "$source_dir/examples/consumer/main.c" $flags
out=$(run -x LD_LIBRARY_PATH="$work/prefix/lib" "$work/ferry-consumer-pc")
grep -qx "No Errors" <<<"$out" || { echo "FAIL: consumer (pkg-config): $out" >&2; exit 1; }
echo "consumer built with pkg-config: No Errors"

# The Debian package: its library, preloaded, runs the demo.
(cd "$work" && cpack -G DEB --config "$build_dir/CPackConfig.cmake" -B "$work/deb" >/dev/null)
deb=$(ls "$work"/deb/*.deb)
dpkg-deb -x "$deb" "$work/root"
library=$(find "$work/root" -name 'libferry.so.*.*.*' | head -1)
[[ -n $library ]] || { echo "FAIL: no libferry.so in $deb" >&2; exit 1; }
out=$(run -x LD_PRELOAD="$library" "$demo")
grep -q "on device buffers: correct" <<<"$out" || { echo "FAIL: the demo on the packaged library: $out" >&2; exit 1; }
echo "$(basename "$deb"): $(dpkg-deb -f "$deb" Depends | cut -c1-80)"
echo "No Errors"
