#!/usr/bin/env bash
# Fresh-machine set-up for Ferry (Debian/Ubuntu):
#   tools/setup.sh demo   install what is missing, build, run the device-buffer demo under mpirun
#   tools/setup.sh test   install what is missing, build, run every test
#   tools/setup.sh sanitize   the unit tests and the multi-threaded MPI programs built with
#                             ASan+UBSan, then with TSan (emulated device)
#   tools/setup.sh fuzz [seconds]   each fuzz target under libFuzzer (clang) for that long (60)
#   tools/setup.sh mpich   libferry.so built for MPICH's ABI (FERRY_MPI=mpich), the MPI
#                          suite's programs that run under MPICH so far
#   tools/setup.sh hip     the HIP/ROCm build (FERRY_GPU=hip, Debian's hipcc and
#                          libamdhip64-dev), its unit tests and part of the MPI suite on
#                          the emulated device (no AMD GPU is needed, or used)
set -euo pipefail

cd "$(dirname "$0")/.."
mode=${1:-}
build_dir=${FERRY_BUILD_DIR:-build}
# Not a Ferry parameter: the programs run below must not see it.
unset FERRY_BUILD_DIR
jobs=$(nproc)

packages=(build-essential cmake ninja-build python3 pkg-config
          libopenmpi-dev openmpi-bin libpmix-dev libhwloc-dev libibverbs-dev
          libgtest-dev libbenchmark-dev scalapack-mpi-test gfortran)
# What the demo needs (the library and one MPI program).
demo_packages=(build-essential cmake ninja-build python3 pkg-config libopenmpi-dev openmpi-bin libhwloc-dev
               libibverbs-dev)
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
  cmake -S . -B "$build_dir" -G Ninja -DFERRY_BUILD_TESTS=ON >/dev/null
  cmake --build "$build_dir" -j "$jobs"
}

# The demo needs the library and one program: no tests, no benchmarks.
demo() {
  echo "== configuring $build_dir/ (what this machine gives Ferry):"
  cmake -S . -B "$build_dir" -G Ninja -DFERRY_BUILD_TESTS=OFF | sed -n 's/^-- Ferry: /   /p'
  echo "== building libferry.so and ferry-demo"
  cmake --build "$build_dir" -j "$jobs" --target ferry ferry-demo | grep -E "error|warning" || true
  local run=(mpirun --oversubscribe -np 2 --bind-to none -x LD_PRELOAD="$PWD/$build_dir/libferry.so")
  echo "== running: ${run[*]} $build_dir/ferry-demo"
  "${run[@]}" "$build_dir/ferry-demo"
  echo "== the same with -x FERRY_STATS=1 (rank 0's calls; engine: GPU to GPU by Ferry, staged: through host"
  echo "   copies, pmpi: the real MPI untouched):"
  "${run[@]}" -x FERRY_STATS=1 "$build_dir/ferry-demo" 2>&1 >/dev/null |
    sed -n 's/^ferry stats rank 0: \(function\|MPI_Allreduce\|MPI_Bcast\|MPI_Alltoallv\) /   \1 /p'
}

# The checked builds compile the host code only: the emulated device runs
# everything the tests reach, and nvcc's objects would carry no checks.
checked_build() {  # <dir> [cmake options...] -- <targets...>
  local dir=$1 options=() targets=()
  shift
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do options+=("$1"); shift; done
  shift
  targets=("$@")
  cmake -S . -B "$dir" -G Ninja -DFERRY_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" "${options[@]}" >/dev/null
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
}

# What the sanitizers run: every unit test, and the MPI programs in which
# several threads (the application's, the engine's progress and worker
# threads) share Ferry's state, with Ferry preloaded (not their runs
# without it, which check only Open MPI), and the traced programs (the
# trace's spans are kept from every thread).
sanitized_mpi_tests='^mpi_suite[.]((threads|nonblocking_engine|peer_messages)[.]|trace[.](np2|streams|nonblocking|messages))'
unsanitized_mpi_tests='[.]host_baseline[.]'
sanitized_targets=(ferry ferry-info pmix_bootstrap_test ferry_unit_tests ferry_gda_tests net_transport_mpi_test
                   mpi_suite_threads mpi_suite_nonblocking_engine mpi_suite_peer_messages mpi_suite_reductions
                   ferry-heat-stencil)

sanitize() {
  local suppressions=$PWD/tests/sanitizers
  export ASAN_OPTIONS=fast_unwind_on_malloc=0:print_suppressions=0:detect_stack_use_after_return=1
  export LSAN_OPTIONS=suppressions=$suppressions/lsan.supp:print_suppressions=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # Open MPI is not built with TSan: copies its libraries make are not tracked.
  export TSAN_OPTIONS=suppressions=$suppressions/tsan.supp:halt_on_error=1:second_deadlock_stack=1
  TSAN_OPTIONS+=:ignore_noninstrumented_modules=1
  local kind dir
  for kind in address,undefined thread; do
    dir=$build_dir-${kind//,/-}
    echo "== FERRY_SANITIZE=$kind ($dir)"
    checked_build "$dir" -DFERRY_SANITIZE="$kind" -- "${sanitized_targets[@]}"
    ctest --test-dir "$dir" -L unit --output-on-failure --timeout 900
    ctest --test-dir "$dir" -R "$sanitized_mpi_tests" -E "$unsanitized_mpi_tests" --output-on-failure --timeout 900
  done
}

fuzz() {
  local seconds=$1 dir=$build_dir-fuzz target corpus log limit
  CC=clang CXX=clang++ checked_build "$dir" -DFERRY_FUZZ=ON -- \
    fuzz_topology_xml fuzz_tune fuzz_params fuzz_tcp_bootstrap
  for target in topology_xml tune params tcp_bootstrap; do
    # New inputs go to a scratch corpus; the tree's corpus only seeds it.
    corpus=$dir/corpus/$target
    mkdir -p "$corpus"
    log=$dir/fuzz_$target.log
    # Each TCP bootstrap run leaves loopback ports in TIME_WAIT for a
    # minute: past about 100 000 runs a minute none is left to listen on.
    limit=()
    [ "$target" = tcp_bootstrap ] && limit=(-runs=50000)
    if ! "$dir/tests/fuzz/fuzz_$target" -max_total_time="$seconds" "${limit[@]}" -artifact_prefix="$dir/" \
        "$corpus" "tests/fuzz/corpus/$target" >"$log" 2>&1; then
      tail -n 60 "$log"
      echo "fuzz_$target failed; the input that did it is in $dir/ (crash-*, timeout-*, leak-*)" >&2
      return 1
    fi
    echo "fuzz_$target: $(grep -m1 '^Done' "$log")"
  done
}

# What the HIP build runs without an AMD GPU: every unit test, and the MPI
# suite's device-buffer programs most of the engine stands under, on the
# emulated device (the backend selection's fallback without a GPU).
hip_mpi_tests='^mpi_suite[.](data_movement|reductions|errors|rma|nonblocking_engine)[.](np2|np3|np4|staged[.]np3|shm[.]np3)$'

# Open MPI refuses root unless told; CI and containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

case "$mode" in
  demo)
    packages=("${demo_packages[@]}")
    optional_packages=()
    install_missing
    demo
    ;;
  test)
    packages+=(python3-matplotlib)
    install_missing
    # tools/ferry-plot's test runs the python3 on PATH, which may be
    # another than the distribution's (pyenv, conda).
    python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install -q matplotlib
    build
    ctest --test-dir "$build_dir" --output-on-failure --timeout 1800
    ;;
  sanitize)
    install_missing
    sanitize
    ;;
  fuzz)
    packages+=(clang libclang-rt-dev)
    install_missing
    fuzz "${2:-60}"
    ;;
  mpich)
    # Open MPI stays the default MPI (its alternatives rank higher); the
    # build names MPICH's wrappers itself.
    packages+=(libmpich-dev mpich)
    install_missing
    cmake -S . -B "$build_dir-mpich" -G Ninja -DFERRY_MPI=mpich -DFERRY_ENABLE_CUDA=OFF >/dev/null
    cmake --build "$build_dir-mpich" -j "$jobs"
    ctest --test-dir "$build_dir-mpich" -L mpich --output-on-failure --timeout 900
    ;;
  hip)
    packages+=(hipcc libamdhip64-dev)
    install_missing
    cmake -S . -B "$build_dir-hip" -G Ninja -DFERRY_GPU=hip >/dev/null
    cmake --build "$build_dir-hip" -j "$jobs"
    ctest --test-dir "$build_dir-hip" -L unit --output-on-failure --timeout 900
    ctest --test-dir "$build_dir-hip" -R "$hip_mpi_tests" --output-on-failure --timeout 900
    ;;
  *)
    echo "usage: tools/setup.sh demo|test|sanitize|fuzz [seconds]|mpich|hip" >&2
    exit 2
    ;;
esac
