#!/usr/bin/env bash
# Fresh-machine set-up for Ferry (Debian/Ubuntu):
#   tools/setup.sh demo   install what is missing, build, run the device-buffer demo under mpirun
#   tools/setup.sh test   install what is missing, build, run every test
set -euo pipefail

cd "$(dirname "$0")/.."
mode=${1:-}
build_dir=${FERRY_BUILD_DIR:-build}
jobs=$(nproc)

packages=(build-essential cmake ninja-build python3 pkg-config
          libopenmpi-dev openmpi-bin libpmix-dev libhwloc-dev libibverbs-dev
          libgtest-dev libbenchmark-dev scalapack-mpi-test)
# Installed where the distribution has them. ROCm SMI (opened at run time
# for AMD GPUs' xGMI links; its unit tests use the real library) is built
# for amd64 only.
optional_packages=(librocm-smi64-1)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
available() { apt-cache show "$1" >/dev/null 2>&1; }

install_missing() {
  local missing=() p
  for p in "${packages[@]}"; do
    installed "$p" || missing+=("$p")
  done
  # An optional package the package lists do not know is not missing.
  for p in "${optional_packages[@]}"; do
    installed "$p" || ! available "$p" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  # Fresh package lists may know optional packages the old ones did not.
  for p in "${optional_packages[@]}"; do
    installed "$p" || ! available "$p" || [[ " ${missing[*]} " == *" $p "* ]] || missing+=("$p")
  done
  echo "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build() {
  cmake -S . -B "$build_dir" -G Ninja >/dev/null
  cmake --build "$build_dir" -j "$jobs"
}

# Open MPI refuses root unless told; CI and containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

case "$mode" in
  demo)
    install_missing
    build
    mpirun --oversubscribe -np 2 --bind-to none -x LD_PRELOAD="$PWD/$build_dir/libferry.so" \
      "$build_dir/ferry-demo"
    ;;
  test)
    install_missing
    build
    ctest --test-dir "$build_dir" --output-on-failure --timeout 1800
    ;;
  *)
    echo "usage: tools/setup.sh demo|test" >&2
    exit 2
    ;;
esac
