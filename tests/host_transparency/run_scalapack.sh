#!/usr/bin/env bash
# Host-buffer transparency against a suite nobody here wrote: Debian's
# scalapack-mpi-test runs its ctest suites twice, on plain Open MPI and with
# libferry.so preloaded into every rank, and both runs must give the same
# results: the same verdict for every test and, wherever plain Open MPI
# reproduces them from run to run, the same printed residuals.
#
# Usage: run_scalapack.sh /path/to/libferry.so
# Environment:
#   SCALAPACK_TESTS         the installed suite (default: Debian's Open MPI build)
#   SCALAPACK_TEST_TIMEOUT  seconds one test may run (default 180)
# The scratch copy goes under $TMPDIR and is kept when the runs differ.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=${SCALAPACK_TESTS:-/usr/lib/x86_64-linux-gnu/scalapack/openmpi-tests}
test_timeout=${SCALAPACK_TEST_TIMEOUT:-180}

# Tests not run, with the reason. Each was measured on this Debian 12
# package with Open MPI 4.1.4, four ranks on two cores.
declare -A excluded_tests=(
  # Fail or hang on plain Open MPI too.
  [xsllt]="hangs on plain Open MPI in every run (real Cholesky tester deadlocks in a BLACS receive; upstream Reference-ScaLAPACK/scalapack#121)"
  [xdllt]="hangs on plain Open MPI in some runs (same deadlock as xsllt, upstream #121)"
  [xdsep]="fails its orthogonality check (QTQ ~1e2 > threshold 50, N=27 on a 3x1 grid) in 3 of 5 plain Open MPI runs"
  # Pass on plain Open MPI but fail under any MPI interposer, Ferry or not:
  # a preload whose MPI_Allreduce only calls PMPI_Allreduce does the same.
  [xcheevr]="reads the uninitialized VL/VU of PCSEPRTST (RANGE='A' subtest); under an interposer the stack garbage there is a NaN, so every row fails 'IL, IU, VL or VU altered'"
  [xzheevr]="same uninitialized VL/VU as xcheevr, in PZSEPRTST"
  # Same tester bug in the real versions; here the verdicts flip on plain
  # Open MPI too (a plain run failed the 'tiny matrices' rows that the run
  # with Ferry passed), so no run of them can be compared with another.
  [xssyevr]="same uninitialized VL/VU as xcheevr, in PSSEPRTST: its 'tiny matrices' rows failed on plain Open MPI and passed with Ferry in one CI run"
  [xdsyevr]="same uninitialized VL/VU as xssyevr, in PDSEPRTST"
  [xslu]="under an interposer, in about half the runs PSGETRS reports 'parameter number 1 had an illegal value' and the job hangs; never on plain Open MPI (18 runs), never with address-space randomization off"
)

# Testers whose printed residuals differ between two runs on plain Open MPI
# on some process grids (e.g. 1x4, 3x1), most likely because BLACS combines
# not asked to be repeatable sum in the order messages arrive. For these,
# each table row's PASSED/FAILED is compared, not its numbers.
verdict_only_tests=(
  xsbrd xdbrd xcbrd xzbrd
  xshrd xdhrd xchrd xzhrd
  xstrd xdtrd xctrd xztrd
  xssep xcsep xzsep
  xsgsep xdgsep xcgsep xzgsep
)

die() {
  echo "run_scalapack.sh: $*" >&2
  exit 1
}

[[ $# -eq 1 ]] || { echo "usage: $0 /path/to/libferry.so" >&2; exit 2; }
[[ -f $1 ]] || die "preload library '$1' not found"
ferry_library=$(realpath "$1")
[[ -f $suite/CTestTestfile.cmake ]] ||
  die "ScaLAPACK's test suite is not installed at $suite (Debian package scalapack-mpi-test); nothing was compared"
command -v ctest >/dev/null || die "ctest not found"

if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Four ranks share CI's two cores: no binding; shared memory without the
# single-copy mechanisms containers usually forbid; mpirun ends a hung job
# itself, a little before ctest would, so no rank is left spinning.
plain_flags="--oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader"
plain_flags+=" --mca btl_vader_single_copy_mechanism none --timeout $((test_timeout - 10))"
ferry_flags="$plain_flags -x LD_PRELOAD=$ferry_library"

# A library the loader refuses is skipped with only a warning, which would
# compare plain Open MPI with itself.
mpiexec=$(command -v mpiexec.openmpi || command -v mpiexec) || die "mpiexec not found"
# shellcheck disable=SC2086 # the flags are one string for MPIEXEC_PREFLAGS
loader_output=$("$mpiexec" -n 1 $ferry_flags true 2>&1) ||
  die "mpiexec with the preload failed: $loader_output"
[[ $loader_output != *"cannot be preloaded"* ]] || die "$loader_output"

work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-scalapack.XXXXXX")
keep_work=true
clean_up() {
  if $keep_work; then echo "scratch copy kept in $work" >&2; else rm -rf "$work"; fi
}
trap clean_up EXIT

excluded_regex="^($(IFS='|'; echo "${!excluded_tests[*]}"))\$"

# The package's BLACS tests call runtest.cmake from its build tree, which is
# not shipped; point them at a stand-in with the same verdict.
use_blacs_runner() {  # <CTestTestfile.cmake>
  sed -i -E "s|\"-P\" \"[^\"]*/runtest\\.cmake\"|\"-P\" \"$here/blacs_runtest.cmake\"|" "$1"
  grep -q "$here/blacs_runtest.cmake" "$1" || die "no BLACS runtest.cmake call found in $1"
}

# Runs every ctest suite of the package in a scratch copy and leaves
# <variant>.verdicts ("name status" lines) and <variant>.outputs/<name>.
run_variant() {  # <variant> <MPIEXEC_PREFLAGS>
  local variant=$1 preflags=$2 tree=$work/$1 suite_dirs suite_dir verdicts reported expected
  local start=$SECONDS
  cp -rL "$suite" "$tree"  # -L: the input files are symlinks relative to /usr
  use_blacs_runner "$tree/BLACS/CTestTestfile.cmake"
  mkdir "$tree.outputs"
  : >"$tree.verdicts"
  mapfile -t suite_dirs < <(find "$tree" -name CTestTestfile.cmake -printf '%h\n' | sort)
  for suite_dir in "${suite_dirs[@]}"; do
    expected=$(cd "$suite_dir" && ctest -N -E "$excluded_regex" | sed -n 's/^Total Tests: //p')
    (cd "$suite_dir" && MPIEXEC_PREFLAGS=$preflags ctest -j1 --timeout "$test_timeout" \
      -E "$excluded_regex" >ctest_console.txt 2>&1) || true
    verdicts=$(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) [ .]*[*]*(.*[^ ]) +[0-9.]+ sec$/\1 \2/p' \
      "$suite_dir/ctest_console.txt")
    reported=$(printf '%s' "$verdicts" | grep -c '^' || true)
    [[ $reported == "$expected" ]] ||
      die "$variant: ctest in $suite_dir reported $reported of its $expected tests (see $suite_dir/ctest_console.txt)"
    [[ -n $verdicts ]] && echo "$verdicts" >>"$tree.verdicts"
    awk -v dir="$tree.outputs" '
      /^[0-9]+\/[0-9]+ Testing: / { name = $3; next }
      /^Output:$/ { getline; file = dir "/" name; printf "" >file; capturing = 1; next }
      /^<end of output>$/ { capturing = 0; close(file); next }
      capturing { print >file }' "$suite_dir/Testing/Temporary/LastTest.log"
  done
  echo "$variant: $(grep -c ' Passed$' "$tree.verdicts") of $(grep -c "" "$tree.verdicts") tests passed in $((SECONDS - start)) s"
}

echo "ScaLAPACK suite: $suite"
echo "excluded, not run:"
for name in $(printf '%s\n' "${!excluded_tests[@]}" | sort); do echo "  $name: ${excluded_tests[$name]}"; done
run_variant plain "$plain_flags"
run_variant ferry "$ferry_flags"

differences=0
report() {
  echo "DIFFERENCE: $*"
  differences=$((differences + 1))
}

declare -A plain_status ferry_status
while read -r name status; do plain_status[$name]=$status; done <"$work/plain.verdicts"
while read -r name status; do ferry_status[$name]=$status; done <"$work/ferry.verdicts"
mapfile -t all_tests < <(printf '%s\n' "${!plain_status[@]}" "${!ferry_status[@]}" | sort -u)
for name in "${all_tests[@]}"; do
  plain=${plain_status[$name]:-"not run"} ferry=${ferry_status[$name]:-"not run"}
  if [[ $plain != "$ferry" ]]; then
    report "$name: '$plain' on plain Open MPI, '$ferry' with Ferry"
  elif [[ $plain != Passed ]]; then
    report "$name: '$plain' on plain Open MPI too; exclude it above, naming the reason"
  fi
done

compared_exactly=0
compared_by_verdict=0
for name in "${all_tests[@]}"; do
  [[ ${plain_status[$name]:-} == Passed && ${ferry_status[$name]:-} == Passed ]] || continue
  mode=exact
  [[ " ${verdict_only_tests[*]} " == *" $name "* ]] && mode=verdicts
  if ! diff -u \
      <(awk -v mode=$mode -f "$here/normalise_output.awk" "$work/plain.outputs/$name") \
      <(awk -v mode=$mode -f "$here/normalise_output.awk" "$work/ferry.outputs/$name") \
      >"$work/$name.diff"; then
    report "$name: output differs (compared: $mode); first lines of the diff:"
    head -n 20 "$work/$name.diff"
  fi
  if [[ $mode == exact ]]; then
    compared_exactly=$((compared_exactly + 1))
  else
    compared_by_verdict=$((compared_by_verdict + 1))
  fi
done

echo "outputs compared: $compared_exactly with their residuals, $compared_by_verdict by verdicts only"
if ((differences > 0)); then
  echo "FAIL: $differences difference(s) between plain Open MPI and Ferry" >&2
  exit 1
fi
keep_work=false
echo "PASS: ScaLAPACK's suite gives the same results with and without $ferry_library"
