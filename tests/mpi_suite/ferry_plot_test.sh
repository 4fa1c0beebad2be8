#!/usr/bin/env bash
# tools/ferry-plot end to end: a ferry-bench run on the machine's device
# writes its CSV, ferry-plot draws one PNG per operation from it; a CSV that
# ferry-bench did not write is refused with a message.
# Usage: ferry_plot_test.sh <ferry-plot> <libferry.so> <ferry-bench> (MPIRUN_ARGS: extra mpirun flags)
set -euo pipefail
plot=$1 library=$2 bench=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# shellcheck disable=SC2086
mpirun --oversubscribe -np 2 ${MPIRUN_ARGS:-} -x LD_PRELOAD="$library" "$bench" --ops allreduce,bcast \
  --sizes 8,4100,1M --iters 3 --warmup 1 --nccl none --host --csv "$work/run.csv" >/dev/null
written=$("$plot" "$work/run.csv" -o "$work/plots" --label ci)
echo "$written"
if [[ $(wc -l <<<"$written") != 2 ]]; then
  echo "FAIL: expected two plots (allreduce, bcast), got: $written" >&2
  exit 1
fi
for png in $written; do
  if [[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') != 89504e470d0a1a0a ]] || [[ $(stat -c %s "$png") -lt 10000 ]]; then
    echo "FAIL: $png is not a PNG of a plot" >&2
    exit 1
  fi
done

printf 'op,size\nallreduce,8\n' >"$work/other.csv"
status=0
"$plot" "$work/other.csv" -o "$work/plots" 2>"$work/err" || status=$?
if [[ $status != 1 ]] || ! grep -q "not a ferry-bench CSV" "$work/err"; then
  echo "FAIL: a CSV ferry-bench did not write should exit 1 saying so (exit $status)" >&2
  exit 1
fi
echo "No Errors"
