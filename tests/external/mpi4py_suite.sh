#!/usr/bin/env bash
# mpi4py's own test suite, with CuPy arrays (real device memory), under
# libferry.so. Run on a machine with a GPU, mpi4py and CuPy installed:
#   tests/external/mpi4py_suite.sh LIBFERRY MPI4PY_SOURCE NP TEST_MODULE...
# MPI4PY_SOURCE is the unpacked source distribution of the installed mpi4py
# (its test/ folder). The harness is patched in a copy, three ways:
# - mpiunittest.is_mpi_gpu answers False: it turns GPU cases off for Open MPI,
#   which is not CUDA-aware on its own (Ferry makes it so);
# - only the CuPy array backends run (cupy, dlpack-cupy);
# - CuPy 14 raises OverflowError for -1 in an unsigned array: such integers
#   are wrapped modulo 2^bits, as NumPy's older casting did.
# Extra mpirun arguments go in MPIRUN_ARGS. The window tests (test_rma,
# test_win) need windows the real MPI makes: Open MPI 4.1's osc/pt2pt refuses
# the MPI_THREAD_MULTIPLE mpi4py asks for, so pass
# "-x MPI4PY_RC_THREAD_LEVEL=serialized --mca osc ^ucx" there.
set -euo pipefail
lib=$(realpath "$1")
source_dir=$(realpath "$2")
ranks=$3
shift 3
work=$(mktemp -d)
cp -r "$source_dir/test" "$work/test"
cd "$work/test"
python3 - <<'PATCH'
from pathlib import Path

unit = Path("mpiunittest.py")
text = unit.read_text()
marker = "def is_mpi_gpu(predicate, array):\n"
assert marker in text, "mpiunittest.is_mpi_gpu not found"
unit.write_text(text.replace(marker, marker + "    return False  # Ferry makes the MPI CUDA-aware\n", 1))

impl = Path("arrayimpl.py")
text = impl.read_text()
old = """            self.array = cupy.zeros(shape, typecode)
            if isinstance(arg, (int, float, complex)):"""
new = """            self.array = cupy.zeros(shape, typecode)
            arg = _wrap_unsigned(arg, self.array.dtype)
            if isinstance(arg, (int, float, complex)):"""
assert old in text, "GPUArrayCuPy.__init__ not found"
text = text.replace(old, new, 1)
helper = '''

def _wrap_unsigned(arg, dtype):
    if dtype.kind != "u":
        return arg
    bits = 8 * dtype.itemsize
    if isinstance(arg, int) and not isinstance(arg, bool):
        return arg % (1 << bits)
    if isinstance(arg, (list, tuple)):
        return [a % (1 << bits) if isinstance(a, int) and not isinstance(a, bool) else a for a in arg]
    return arg


def loop(*args):'''
text = text.replace("\n\ndef loop(*args):", helper, 1)
text = text.replace("    for array in ArrayBackends:\n",
                    "    for array in [b for b in ArrayBackends if b.backend in ('cupy', 'dlpack-cupy')]:\n", 1)
impl.write_text(text)
PATCH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck disable=SC2086
exec mpirun --oversubscribe --bind-to none -np "$ranks" ${MPIRUN_ARGS:-} -x LD_PRELOAD="$lib" \
  python3 main.py --no-builddir --cupy --no-numba "$@"
