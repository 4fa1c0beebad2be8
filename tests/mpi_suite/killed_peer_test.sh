#!/usr/bin/env bash
# A peer killed with SIGKILL, the launcher told to keep the job running
# (Open MPI 4: orte_enable_recovery; 5: --enable-recovery): the survivor's next device collective
# returns an error naming the dead rank within 10 s (killed_peer.cc).
# Usage: killed_peer_test.sh <mpiexec> <libferry.so> <killed_peer> <device> [mpiexec flags...]
set -uo pipefail
mpiexec=$1 library=$2 program=$3 device=$4
shift 4
recovery=(--mca orte_enable_recovery 1)
if "$mpiexec" --version 2>&1 | grep -q "(Open MPI) [5-9]"; then
  recovery=(--enable-recovery)
fi
output=$(timeout 60 "$mpiexec" --oversubscribe -np 2 "$@" "${recovery[@]}" \
  -x LD_PRELOAD="$library" -x FERRY_DEVICE="$device" "$program" 2>&1)
pkill -9 -f "^$program" 2>/dev/null
echo "$output"
if ! grep -q "^rank 0: MPI_Allreduce returned class [0-9]* after [0-9.]* s: ferry: a peer process has ended: rank 1 (pid [0-9]*)" <<<"$output"; then
  echo "FAIL: rank 0's error does not name the ended peer" >&2
  exit 1
fi
grep -q "^No Errors" <<<"$output" || exit 1
