#!/usr/bin/env bash
# NVTX ranges with a tool attached (NVTX_INJECTION64_PATH): the demo's calls
# under the tests' NVTX probe open a range per intercepted call and per
# engine phase, and close every one; without the tool, no range at all.
# Usage: nvtx_test.sh <nvtx probe> <libferry.so> <ferry-demo> (MPIRUN_ARGS: extra mpirun flags)
set -euo pipefail
probe=$1 library=$2 demo=$3
# shellcheck disable=SC2086
with=$(mpirun --oversubscribe -np 2 ${MPIRUN_ARGS:-} -x LD_PRELOAD="$library" -x NVTX_INJECTION64_PATH="$probe" \
  "$demo" 2>&1)
echo "$with" | sort | uniq -c | sort -rn | head -20
for line in "nvtx push MPI_Allreduce" "nvtx push MPI_Alltoallv" "nvtx start set-up" "nvtx start handshake" \
            "nvtx start device"; do
  grep -qx "$line" <<<"$with" || { echo "FAIL: no '$line'" >&2; exit 1; }
done
[[ $(grep -cx "nvtx balanced" <<<"$with") == 2 ]] || { echo "FAIL: ranges left open" >&2; exit 1; }
grep -q "on device buffers: correct" <<<"$with" || { echo "FAIL: the demo failed" >&2; exit 1; }
# shellcheck disable=SC2086
without=$(mpirun --oversubscribe -np 2 ${MPIRUN_ARGS:-} -x LD_PRELOAD="$library" "$demo" 2>&1)
if grep -q "^nvtx " <<<"$without"; then echo "FAIL: ranges without a tool" >&2; exit 1; fi
echo "No Errors"
