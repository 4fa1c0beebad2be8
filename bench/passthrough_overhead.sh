#!/usr/bin/env bash
# Host-buffer pass-through overhead of libferry.so, measured in one sitting:
# runs passthrough_overhead alternately with and without the preload and
# compares the per-call medians.
#
# Usage: passthrough_overhead.sh <libferry.so> [<passthrough_overhead binary>]
# The binary defaults to bench/passthrough_overhead in the build folder that
# holds libferry.so. Environment: ROUNDS (5), ITERATIONS (20000), RANKS (2).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 <libferry.so> [<passthrough_overhead binary>]" >&2
  exit 2
fi
ferry_library=$(realpath "$1")
bench_binary=$(realpath "${2:-$(dirname "$ferry_library")/bench/passthrough_overhead}")
rounds=${ROUNDS:-5}
iterations=${ITERATIONS:-20000}
ranks=${RANKS:-2}
for file in "$ferry_library" "$bench_binary"; do
  [[ -f $file ]] || { echo "error: $file not found" >&2; exit 2; }
done

if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# One rank per core when the machine has enough; oversubscribed timings
# measure the scheduler, not Ferry.
binding=(--bind-to none)
if (( $(nproc) >= ranks )); then binding=(--map-by core --bind-to core); fi
# Shared memory without CMA: containers often forbid the ptrace it needs.
mpirun_flags=(-n "$ranks" "${binding[@]}" --mca btl self,vader
              --mca btl_vader_single_copy_mechanism none)

results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

run_variant() {  # <variant> <round>
  local variant=$1 round=$2 preload=()
  [[ $variant == ferry ]] && preload=(-x "LD_PRELOAD=$ferry_library")
  local output="$results/$variant.$round"
  mpirun "${mpirun_flags[@]}" "${preload[@]}" "$bench_binary" --iterations "$iterations" >"$output"
  local expected_preload=none
  [[ $variant == ferry ]] && expected_preload=ferry
  if ! grep -qx "preload $expected_preload" "$output"; then
    echo "error: $variant run reports '$(grep '^preload' "$output")'" >&2
    exit 1
  fi
}

# Alternate which variant goes first so slow drift (thermal, neighbours on
# the host) does not land on one side.
for ((round = 1; round <= rounds; round++)); do
  if ((round % 2)); then order=(plain ferry); else order=(ferry plain); fi
  for variant in "${order[@]}"; do run_variant "$variant" "$round"; done
done

echo "ranks $ranks, $rounds rounds x $iterations calls per variant, mpirun ${mpirun_flags[*]}"
echo "per-call median (us): median over rounds [min..max of the round medians]"
# Rows: variant case bytes median_us (one per round); reduced per case.
for variant in plain ferry; do
  awk -v variant="$variant" '$1 == "case" {print variant, $2, $4, $6}' "$results/$variant".*
done | awk '
  function median(values, n,   sorted, i, j, t) {
    for (i = 1; i <= n; i++) sorted[i] = values[i]
    for (i = 2; i <= n; i++)
      for (j = i; j > 1 && sorted[j - 1] > sorted[j]; j--) {
        t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t
      }
    return n % 2 ? sorted[(n + 1) / 2] : (sorted[n / 2] + sorted[n / 2 + 1]) / 2
  }
  {
    key = $2 " " $3
    if (!(key in seen)) { seen[key] = 1; order[++cases] = key }
    n = ++count[$1, key]
    value[$1, key, n] = $4
    if (n == 1 || $4 < low[$1, key]) low[$1, key] = $4
    if (n == 1 || $4 > high[$1, key]) high[$1, key] = $4
  }
  END {
    printf "%-22s %6s  %-26s  %-26s  %9s\n", "case", "bytes", "without Ferry", "with Ferry", "overhead"
    for (c = 1; c <= cases; c++) {
      key = order[c]
      for (v = 0; v < 2; v++) {
        variant = v ? "ferry" : "plain"
        delete runs
        for (i = 1; i <= count[variant, key]; i++) runs[i] = value[variant, key, i]
        m[variant] = median(runs, count[variant, key])
        text[variant] = sprintf("%7.3f [%7.3f..%7.3f]", m[variant], low[variant, key], high[variant, key])
      }
      split(key, parts, " ")
      printf "%-22s %6s  %-26s  %-26s  %+8.1f%%\n", parts[1], parts[2], text["plain"], text["ferry"],
             100 * (m["ferry"] - m["plain"]) / m["plain"]
    }
  }'
