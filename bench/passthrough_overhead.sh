#!/usr/bin/env bash
# Host-buffer pass-through overhead of libferry.so, measured in one sitting:
# runs passthrough_overhead alternately with and without the preload and
# compares the medians.
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
mpirun_flags=(-n "$ranks" "${binding[@]}" --mca btl "self,vader"
              --mca btl_vader_single_copy_mechanism none)

results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

run_variant() {  # <variant> <round>
  local variant=$1 output="$results/$1.$2" preload=() expected_preload=none
  if [[ $variant == ferry ]]; then
    preload=(-x "LD_PRELOAD=$ferry_library")
    expected_preload=ferry
  fi
  mpirun "${mpirun_flags[@]}" "${preload[@]}" "$bench_binary" --iterations "$iterations" >"$output"
  if ! grep -qx "preload $expected_preload" "$output"; then
    echo "error: the $variant run reports '$(grep '^preload' "$output")'" >&2
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
echo "microseconds per call, median over rounds of each run's median; [min..max] over rounds"
# The median of values[1..n], for the tables below.
awk_median='
  function median(values, n,   sorted, i, j, t) {
    for (i = 1; i <= n; i++) sorted[i] = values[i]
    for (i = 2; i <= n; i++)
      for (j = i; j > 1 && sorted[j - 1] > sorted[j]; j--) {
        t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t
      }
    return n % 2 ? sorted[(n + 1) / 2] : (sorted[n / 2] + sorted[n / 2 + 1]) / 2
  }
'

echo "per call: each call timed alone; batched: calls timed in batches of 100 (finer than the clock tick)"
echo "overhead from the batched medians, and from the fastest round of each side (robust to slow spells)"
# Rows: variant case bytes per-call-median batch-median (one per round).
for variant in plain ferry; do
  awk -v variant="$variant" '$1 == "case" {print variant, $2, $4, $6, $12}' "$results/$variant".*
done | awk "$awk_median"'
  function percent(with_ferry, without) { return 100 * (with_ferry - without) / without }
  {
    key = $2 " " $3
    if (!(key in seen)) { seen[key] = 1; order[++cases] = key }
    n = ++rounds[$1, key]
    per_call[$1, key, n] = $4
    batched[$1, key, n] = $5
  }
  END {
    printf "%-21s %5s | %-24s | %-25s %-25s %s\n", "case", "bytes", "per call: without, with",
           "batched: without Ferry", "with Ferry", "overhead: medians, fastest rounds"
    for (c = 1; c <= cases; c++) {
      key = order[c]
      for (v = 0; v < 2; v++) {
        variant = v ? "ferry" : "plain"
        n = rounds[variant, key]
        delete values
        for (i = 1; i <= n; i++) values[i] = per_call[variant, key, i]
        call_median[variant] = median(values, n)
        low = high = batched[variant, key, 1]
        for (i = 1; i <= n; i++) {
          values[i] = batched[variant, key, i]
          if (values[i] < low) low = values[i]
          if (values[i] > high) high = values[i]
        }
        batch_median[variant] = median(values, n)
        fastest[variant] = low
        spread[variant] = sprintf("%7.4f [%7.4f..%7.4f]", batch_median[variant], low, high)
      }
      split(key, parts, " ")
      printf "%-21s %5s | %7.3f %7.3f (%+5.1f%%) | %-25s %-25s %+7.1f%% %+7.1f%%\n", parts[1], parts[2],
             call_median["plain"], call_median["ferry"], percent(call_median["ferry"], call_median["plain"]),
             spread["plain"], spread["ferry"], percent(batch_median["ferry"], batch_median["plain"]),
             percent(fastest["ferry"], fastest["plain"])
    }
  }'

echo
echo "in-process pairs (the ferry runs): batches of MPI_ (Ferry's wrapper) alternating with PMPI_ (the real MPI)"
echo "overhead per round is the median of the pairs' differences; median [min..max] over rounds"
awk '$1 == "paired" {print $2, $4, $6, $8, $10, $12}' "$results"/ferry.* | awk "$awk_median"'
  {
    key = $1 " " $2
    if (!(key in seen)) { seen[key] = 1; order[++cases] = key }
    n = ++rounds[key]
    pmpi[key, n] = $4; ns[key, n] = $5; pct[key, n] = $6
  }
  END {
    printf "%-21s %5s | %-10s | %-26s | %s\n", "case", "bytes", "PMPI_ us", "Ferry ns per call", "overhead"
    for (c = 1; c <= cases; c++) {
      key = order[c]; n = rounds[key]
      for (f = 0; f < 3; f++) {
        delete values
        low = high = ""
        for (i = 1; i <= n; i++) {
          values[i] = f == 0 ? pmpi[key, i] : f == 1 ? ns[key, i] : pct[key, i]
          if (low == "" || values[i] < low) low = values[i]
          if (high == "" || values[i] > high) high = values[i]
        }
        m[f] = median(values, n); lo[f] = low; hi[f] = high
      }
      split(key, parts, " ")
      printf "%-21s %5s | %10.4f | %6.2f [%6.2f..%6.2f]   | %+5.2f%% [%+5.2f..%+5.2f]\n", parts[1], parts[2],
             m[0], m[1], lo[1], hi[1], m[2], lo[2], hi[2]
    }
  }'
