#!/usr/bin/env bash
# net_transport_mpi_test killed over the socket provider: rank 1 dies while
# rank 0 waits on it; rank 0 must end its receive in kPeerEnded within
# seconds (the program checks), and its log must name the lost rank and its
# address. Open MPI is told to keep the job running (orte_enable_recovery).
# Usage: net_transport_killed_test.sh <mpiexec> <net_transport_mpi_test> <device> [mpiexec flags...]
set -uo pipefail
mpiexec=$1 program=$2 device=$3
shift 3
output=$(timeout 60 "$mpiexec" --oversubscribe -np 2 "$@" --mca orte_enable_recovery 1 \
  -x FERRY_DEVICE="$device" -x FERRY_NET=socket -x FERRY_SOCKET_IFNAME=lo -x FERRY_DEBUG=WARN \
  "$program" killed 2>&1)
echo "$output"
if ! grep -q "socket network: rank 0 lost rank 1 at 127\.0\.0\.1:[0-9]*" <<<"$output"; then
  echo "FAIL: rank 0's log does not name the lost peer and its address" >&2
  exit 1
fi
grep -q "^No Errors" <<<"$output" || exit 1
