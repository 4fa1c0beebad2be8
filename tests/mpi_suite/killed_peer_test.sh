#!/usr/bin/env bash
# A peer killed with SIGKILL, the launcher told to keep the job running
# (Open MPI 4: orte_enable_recovery; 5: --enable-recovery): the survivor's
# device collective returns an error naming the dead rank within 10 s
# (killed_peer.cc). KILLED_PEER_WHEN=nonblocking: the same for
# MPI_Iallreduce; waiting: the peer dies while the survivor's ring steps
# wait for it, which must then give up (their warning says why) rather than
# wait FERRY_HANDSHAKE_TIMEOUT. Other programs: KILLED_PEER_CALL names the
# call rank 0 reports (a regular expression), KILLED_PEER_WRAPPER a command
# each rank runs the program through (virtual_node.sh); FERRY_RMA_ACROSS is
# passed on.
# Usage: killed_peer_test.sh <mpiexec> <libferry.so> <killed_peer> <device> [mpiexec flags...]
set -uo pipefail
mpiexec=$1 library=$2 program=$3 device=$4
shift 4
recovery=(--mca orte_enable_recovery 1)
if "$mpiexec" --version 2>&1 | grep -q "(Open MPI) [5-9]"; then
  recovery=(--enable-recovery)
fi
when=${KILLED_PEER_WHEN:-}
settings=()
if [[ $when == waiting ]]; then
  settings=(-x FERRY_TUNE=allreduce:0-:ring -x FERRY_DEBUG=WARN -x FERRY_DEBUG_SUBSYS=COLL)
fi
if [[ -n ${FERRY_RMA_ACROSS:-} ]]; then
  settings+=(-x FERRY_RMA_ACROSS)
fi
call=${KILLED_PEER_CALL:-MPI_I?[Aa]llreduce}
wrapper=()
if [[ -n ${KILLED_PEER_WRAPPER:-} ]]; then
  wrapper=("$KILLED_PEER_WRAPPER")
  settings+=(-x FERRY_SUITE_RANKS_PER_NODE=1)
fi
output=$(timeout 60 "$mpiexec" --oversubscribe -np 2 "$@" "${recovery[@]}" \
  -x LD_PRELOAD="$library" -x FERRY_DEVICE="$device" "${settings[@]}" "${wrapper[@]}" "$program" $when 2>&1)
pkill -9 -f "^$program" 2>/dev/null
echo "$output"
if ! grep -Eq "^rank 0: $call returned class [0-9]+ after [0-9.]+ s: ferry: a peer process has ended: rank 1 (\(pid [0-9]+\) of a communicator|of a group of [0-9]+ ranks, on another machine)" <<<"$output"; then
  echo "FAIL: rank 0's error does not name the ended peer" >&2
  exit 1
fi
if [[ $when == waiting ]] && ! grep -q "ring allreduce failed (a peer process has ended)" <<<"$output"; then
  echo "FAIL: the peer did not end while rank 0's ring steps waited for it" >&2
  exit 1
fi
grep -q "^No Errors" <<<"$output" || exit 1
