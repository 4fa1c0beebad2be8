#!/usr/bin/env bash
# bench/tune_compare.sh end to end on the machine's device: two settings
# over two operations and two sizes give a row each, with both settings'
# medians and ratios; a malformed setting stops it before anything runs,
# and one Ferry does not take is named.
# Usage: tune_compare_test.sh <tune_compare.sh> <libferry.so> <ferry-bench>
set -euo pipefail
script=$1 library=$2 bench=$3

output=$(ROUNDS=2 RANKS=2 OPS=allreduce,bcast SIZES=8,4100 ITERS=5 "$script" "$library" "$bench" \
  default 'FERRY_TUNE=allreduce:0-:oneshot,bcast:0-:pull;FERRY_WORKER=0')
echo "$output"
rows=$(grep -Ec '^(allreduce|bcast) +(8|4100) \| +[0-9.]+ \[ *[0-9.]+\.\. *[0-9.]+\] x1\.00 \| +[0-9.]+ \[ *[0-9.]+\.\. *[0-9.]+\] x[0-9]+\.[0-9]{2}$' <<<"$output" || true)
if [[ $rows != 4 ]]; then
  echo "FAIL: expected 4 rows with both settings, found $rows" >&2
  exit 1
fi

status=0
"$script" "$library" "$bench" default 'FERRY_TUNE' >/dev/null 2>"${TMPDIR:-/tmp}/tune_compare_err.$$" || status=$?
if [[ $status != 2 ]] || ! grep -q "is not NAME=VALUE" "${TMPDIR:-/tmp}/tune_compare_err.$$"; then
  echo "FAIL: a malformed setting should exit 2 naming it (exit $status)" >&2
  cat "${TMPDIR:-/tmp}/tune_compare_err.$$" >&2
  rm -f "${TMPDIR:-/tmp}/tune_compare_err.$$"
  exit 1
fi
rm -f "${TMPDIR:-/tmp}/tune_compare_err.$$"
# A setting Ferry does not take is named before the timings.
warnings=$(ROUNDS=1 OPS=allreduce SIZES=8 ITERS=1 "$script" "$library" "$bench" 'FERRY_TUNE=allreduce:0-:nosuch' 2>&1 >/dev/null)
if ! grep -q "warned under setting 'FERRY_TUNE=allreduce:0-:nosuch'" <<<"$warnings" ||
   ! grep -q "FERRY_TUNE entry 'allreduce:0-:nosuch'" <<<"$warnings"; then
  echo "FAIL: no warning for a FERRY_TUNE Ferry does not take:" >&2
  echo "$warnings" >&2
  exit 1
fi
echo "No Errors"
