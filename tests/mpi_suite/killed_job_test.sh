#!/usr/bin/env bash
# Nothing of Ferry's stays in /dev/shm when a job is killed with SIGKILL
# while its ranks share memory (killed_job.cc): the job's launcher and every
# rank are killed at once, as a batch system's time limit does.
# Usage: killed_job_test.sh <mpiexec> <libferry.so> <killed_job> <device> [mpiexec flags...]
set -uo pipefail
mpiexec=$1 library=$2 program=$3 device=$4
shift 4
output=$(mktemp)
trap 'rm -f "$output"' EXIT
ferry_shm() { find /dev/shm -maxdepth 1 -name 'ferry-*' 2>/dev/null | sort; }
before=$(ferry_shm)

"$mpiexec" --oversubscribe -np 2 "$@" -x LD_PRELOAD="$library" -x FERRY_DEVICE="$device" \
  -x FERRY_PT2PT_BOUNCE_BYTES=1 -x FERRY_PT2PT_CLAIM_US=1 "$program" >"$output" 2>&1 &
launcher=$!
for _ in $(seq 600); do
  grep -q "holding shared memory" "$output" && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "holding shared memory" "$output"; then
  echo "FAIL: the job did not reach the point where it holds shared memory" >&2
  cat "$output" >&2
  kill -9 "$launcher" 2>/dev/null
  pkill -9 -f "^$program" 2>/dev/null
  exit 1
fi
during=$(ferry_shm)
pkill -9 -f "^$program"
kill -9 "$launcher" 2>/dev/null
wait "$launcher" 2>/dev/null
for _ in $(seq 100); do
  pgrep -f "^$program" >/dev/null || break
  sleep 0.1
done
after=$(ferry_shm)
left=$(comm -13 <(echo "$before") <(echo "$after") | sed '/^$/d')
named=$(comm -13 <(echo "$before") <(echo "$during") | sed '/^$/d')
if [[ -n $left ]]; then
  echo "FAIL: the killed job left in /dev/shm:" >&2
  echo "$left" >&2
  exit 1
fi
if [[ -n $named ]]; then
  echo "FAIL: while it ran the job named shared memory in /dev/shm (a kill would leave it):" >&2
  echo "$named" >&2
  exit 1
fi
echo "No Errors"
