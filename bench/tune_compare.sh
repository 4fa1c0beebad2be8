#!/usr/bin/env bash
# Ferry's device collectives under several settings, in one sitting: runs
# ferry-bench once per setting per round, the settings' order turned every
# round so that drift does not land on one of them, and prints per
# operation and size the median over rounds of each setting's host-clock
# time, its spread, and its ratio to the first setting. For checking the
# tuner's defaults on a machine, e.g.
#   tune_compare.sh build/libferry.so build/bench/ferry-bench default 'FERRY_TUNE=bcast:0-512K:ll'
#
# Usage: tune_compare.sh <libferry.so> <ferry-bench> SETTING [SETTING...]
#   SETTING: "default" (nothing set), or NAME=VALUE[;NAME=VALUE...], each
#   passed to every rank with mpirun -x.
# Environment: ROUNDS (3), RANKS (2), OPS (allreduce,bcast,alltoallv),
#   SIZES (8,2K,32K,128K,256K,512K), ITERS (1000), MPIRUN_ARGS (more mpirun
#   arguments, split at spaces, e.g. "--bind-to core -x CUDA_MPS_PIPE_DIRECTORY").
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 <libferry.so> <ferry-bench> SETTING [SETTING...]" >&2
  exit 2
fi
ferry_library=$(realpath "$1")
bench_binary=$(realpath "$2")
shift 2
settings=("$@")
rounds=${ROUNDS:-3}
ranks=${RANKS:-2}
ops=${OPS:-allreduce,bcast,alltoallv}
sizes=${SIZES:-8,2K,32K,128K,256K,512K}
iterations=${ITERS:-1000}
read -r -a extra_args <<<"${MPIRUN_ARGS:-}"
for file in "$ferry_library" "$bench_binary"; do
  [[ -f $file ]] || { echo "error: $file not found" >&2; exit 2; }
done

# Each setting as mpirun -x arguments; a malformed one stops the run before
# anything is timed.
declare -a exports
for ((s = 0; s < ${#settings[@]}; s++)); do
  exports[s]=""
  [[ ${settings[s]} == default ]] && continue
  IFS=';' read -r -a pairs <<<"${settings[s]}"
  for pair in "${pairs[@]}"; do
    if [[ ! $pair =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]]; then
      echo "error: setting '${settings[s]}': '$pair' is not NAME=VALUE" >&2
      exit 2
    fi
    exports[s]+="$pair"$'\n'
  done
done

if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

# mpirun -x arguments of setting <s>, into setting_args.
set_setting_args() {
  setting_args=()
  while IFS= read -r pair; do
    if [[ -n $pair ]]; then setting_args+=(-x "$pair"); fi
  done <<<"${exports[$1]}"
}

# ferry-bench under setting <s>, with Ferry's log level <level> unless it
# is empty, its output into <log>; further arguments go to ferry-bench.
run_bench() {  # <setting index> <level> <log> [ferry-bench arguments...]
  local s=$1 log=$3 level_args=()
  [[ -n $2 ]] && level_args=(-x "FERRY_DEBUG=$2")
  shift 3
  set_setting_args "$s"
  mpirun -n "$ranks" --oversubscribe "${extra_args[@]}" -x "LD_PRELOAD=$ferry_library" "${setting_args[@]}" \
      "${level_args[@]}" "$bench_binary" --ops "$ops" --sizes "$sizes" --nccl none --no-staged "$@" >"$log" 2>&1
}

run_setting() {  # <setting index> <round>
  local s=$1 csv="$results/$1.$2.csv"
  if ! run_bench "$s" "" "$results/$1.$2.log" --iters "$iterations" --csv "$csv"; then
    echo "error: ferry-bench failed under setting '${settings[s]}' (round $2):" >&2
    tail -n 20 "$results/$1.$2.log" >&2
    exit 1
  fi
}

# A short run per setting with Ferry's warnings on, so that a setting it
# does not take (a misspelt FERRY_TUNE, say) shows before the timings.
for ((s = 0; s < ${#settings[@]}; s++)); do
  run_bench "$s" WARN "$results/$s.check.log" --iters 1 --warmup 0 || true
  if grep -q ' ferry WARN ' "$results/$s.check.log"; then
    echo "warning: Ferry warned under setting '${settings[s]}':" >&2
    grep ' ferry WARN ' "$results/$s.check.log" | sed 's/^[^ ]* ferry WARN/ferry WARN/' | sort -u >&2
  fi
done

for ((round = 1; round <= rounds; round++)); do
  order=()
  for ((s = 0; s < ${#settings[@]}; s++)); do order+=("$s"); done
  if ((round % 2 == 0)); then
    reversed=()
    for ((i = ${#order[@]} - 1; i >= 0; i--)); do reversed+=("${order[i]}"); done
    order=("${reversed[@]}")
  fi
  for s in "${order[@]}"; do run_setting "$s" "$round"; done
done

# Rows "op bytes setting microseconds", one per round, from the CSV files
# (columns: op, bytes, ranks, iterations, ferry_us, ...).
for ((s = 0; s < ${#settings[@]}; s++)); do
  for ((round = 1; round <= rounds; round++)); do
    awk -F, -v setting="$s" 'NR > 1 && $5 != "" {print $1, $2, setting, $5}' "$results/$s.$round.csv"
  done
done >"$results/rows"

echo "ranks $ranks, $rounds rounds, $iterations timed calls per size; host-clock us of the slowest rank,"
echo "median over rounds [min..max]; x: against the first setting"
for ((s = 0; s < ${#settings[@]}; s++)); do echo "  setting $((s + 1)): ${settings[s]}"; done
header=$(printf "%-10s %10s" op bytes)
for ((s = 0; s < ${#settings[@]}; s++)); do header+=$(printf " | %-31s" "setting $((s + 1))"); done
echo "$header"
awk '{print $1, $2}' "$results/rows" | awk '!seen[$0]++' | while read -r op bytes; do
  line=$(printf "%-10s %10s" "$op" "$bytes")
  first=""
  for ((s = 0; s < ${#settings[@]}; s++)); do
    # The sorted times of this case under this setting: median, least, most.
    read -r median low high < <(awk -v op="$op" -v bytes="$bytes" -v s="$s" \
        '$1 == op && $2 == bytes && $3 == s {print $4}' "$results/rows" | sort -g |
        awk '{v[NR] = $1} END {
               if (NR == 0) { print "- - -"; exit }
               m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
               print m, v[1], v[NR]
             }')
    if [[ $median == - ]]; then
      line+=$(printf " | %-31s" "-")
      continue
    fi
    [[ -z $first ]] && first=$median
    ratio=$(awk -v a="$median" -v b="$first" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')
    line+=$(printf " | %7.2f [%6.2f..%6.2f] x%s" "$median" "$low" "$high" "$ratio")
  done
  echo "$line"
done
