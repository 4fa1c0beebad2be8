#!/usr/bin/env bash
# FERRY_TRACE end to end: an MPI suite program at two ranks writes a trace
# per rank; each is valid JSON whose spans nest (ferry-trace check), holds
# one span for every call FERRY_STATS counted on that rank, and engine
# spans with their device work on a GPU track (engine; nonblocking for
# MPI_Iallreduce), flow arrows from each device message's send to its
# receive (messages), or the GDA queue's operations as async spans from
# post to completion (gda); ferry-trace merge puts both ranks in one file.
# Usage: trace_test.sh <ferry-trace> <libferry.so> <program> [engine|nonblocking|messages|gda]
# (MPIRUN_ARGS: extra mpirun flags; TRACE_WRAPPER: a command each rank runs
# the program through; PRELOAD_FIRST: a library preloaded before Ferry, a
# sanitizer's runtime)
set -euo pipefail
tool=$1 library=$2 program=$3 shows=${4:-engine}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# shellcheck disable=SC2086
mpirun --oversubscribe -np 2 ${MPIRUN_ARGS:-} -x LD_PRELOAD="${PRELOAD_FIRST:+$PRELOAD_FIRST }$library" -x FERRY_STATS=1 \
  -x FERRY_TRACE="$work/trace-%r.json" ${TRACE_WRAPPER:-} "$program" >"$work/out" 2>"$work/err"
grep -qx "No Errors" "$work/out" || { echo "FAIL: the program failed" >&2; cat "$work/out" "$work/err" >&2; exit 1; }
for rank in 0 1; do
  counts=$("$tool" check "$work/trace-$rank.json") || { echo "FAIL: rank $rank's trace: $counts" >&2; exit 1; }
  echo "$counts" | cut -c1-200
  # Every function FERRY_STATS counted, as many spans.
  while read -r name calls; do
    spans=$(grep -o "$name [0-9]*" <<<"$counts" | head -1 | cut -d' ' -f2)
    if [[ ${spans:-0} != "$calls" ]]; then
      echo "FAIL: rank $rank: $calls calls of $name counted, ${spans:-0} spans" >&2
      exit 1
    fi
  done < <(sed -n "s/^ferry stats rank $rank: \(MPI_[A-Za-z_]*\) \+\([0-9]\+\) .*/\1 \2/p" "$work/err")
  if [[ $shows == engine ]]; then
    grep -q "engine allreduce [1-9]" <<<"$counts" || { echo "FAIL: rank $rank: no engine spans" >&2; exit 1; }
  fi
done
"$tool" merge "$work"/trace-*.json -o "$work/job.json"
python3 - "$work/job.json" "$shows" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
ranks = {e["pid"] for e in events if e.get("ph") == "X"}
assert ranks == {0, 1}, ranks
stamps = [e["ts"] for e in events if e.get("ph") == "X"]
assert stamps == sorted(stamps), "merged events out of order"
# Every flow arrow starts in one rank's span and finishes once in the
# other's, no earlier; each end lies within a span of its thread.
starts = {e["id"]: e for e in events if e.get("ph") == "s"}
finishes = [e for e in events if e.get("ph") == "f"]
assert len({e["id"] for e in finishes}) == len(finishes), "a flow finished twice"
spans = [e for e in events if e.get("ph") == "X"]
def within_span(end):
    return any(s["pid"] == end["pid"] and s["tid"] == end["tid"] and s["ts"] <= end["ts"] <= s["ts"] + s["dur"]
               for s in spans)
for f in finishes:
    s = starts.get(f["id"])
    assert s is not None, f"a flow finished that never started: {f}"
    assert s["pid"] != f["pid"] and s["ts"] <= f["ts"], (s, f)
    assert within_span(s) and within_span(f), (s, f)
if sys.argv[2] == "gda":
    # Every queue operation: a begin and an end under one id, in order, and
    # taken and started by the proxy between them.
    begins = {(e["pid"], e["id"]): e for e in events if e.get("ph") == "b" and e.get("cat") == "gda"}
    ends = {(e["pid"], e["id"]): e for e in events if e.get("ph") == "e" and e.get("cat") == "gda"}
    assert begins and begins.keys() == ends.keys(), (len(begins), len(ends))
    for key, b in begins.items():
        e, args = ends[key], b["args"]
        assert b["name"].startswith("gda ") and e["name"] == b["name"], (b, e)
        assert b["ts"] <= args["taken_us"] <= args["started_us"] <= e["ts"], (b, e)
        assert 0 <= args["target"] <= 1, b
    names = sorted({b["name"] for b in begins.values()})
    print(f"{len(begins)} queue operations: {', '.join(names)}")
if sys.argv[2] == "engine":
    # Each engine call's device work: one span on its GPU's track, within
    # the call's span; an allreduce that carried bytes always has device
    # work on every rank, and says its algorithm.
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    gpu = [e for e in spans if e.get("cat") == "gpu"]
    calls = [e for e in spans if e["name"].startswith("engine ")]
    assert gpu, "no device work on a GPU track"
    within = {id(c): [] for c in calls}
    for g in gpu:
        assert tracks.get((g["pid"], g["tid"]), "").startswith("GPU "), g
        outer = [c for c in calls if c["pid"] == g["pid"] and c["name"][len("engine "):] == g["name"][len("gpu "):]
                 and c["ts"] <= g["ts"] and g["ts"] + g["dur"] <= c["ts"] + c["dur"]]
        assert outer, f"a GPU span within no engine call: {g}"
        within[id(min(outer, key=lambda c: c["dur"]))].append(g)  # the innermost (calls by machine nest)
    for c in calls:
        assert len(within[id(c)]) <= 1, c
        if c["name"] == "engine allreduce" and "bytes" in c.get("args", {}):
            assert within[id(c)], f"an allreduce without its GPU span: {c}"
            assert "algorithm" in c["args"], f"no algorithm: {c}"
    print(f"{len(gpu)} GPU spans in {len(calls)} engine calls")
if sys.argv[2] == "nonblocking":
    # Each nonblocking allreduce's device work: one span on the GPU's track
    # of the rank that did it (every rank, or one rank of a GPU for all of
    # them where ranks share it without MPS), starting no earlier than the
    # call that queued it.
    working = 0
    for rank in (0, 1):
        calls = sorted(e["ts"] for e in spans if e["pid"] == rank and e["name"] == "MPI_Iallreduce")
        gpu = sorted(e["ts"] for e in spans if e["pid"] == rank and e["name"] == "gpu MPI_Iallreduce")
        assert calls and len(gpu) in (0, len(calls)), f"rank {rank}: {len(calls)} calls, {len(gpu)} GPU spans"
        assert all(c <= g for c, g in zip(calls, gpu)), f"rank {rank}: a GPU span before its call"
        working += len(gpu) > 0
    assert working, "no GPU span of a nonblocking allreduce"
    print(f"{len(calls)} GPU spans of nonblocking allreduces on {working} of 2 ranks")
if sys.argv[2] == "messages":
    assert finishes, "no flow arrows"
    # A message's span names its peer.
    for e in spans:
        role = {"MPI_Send": "dest", "MPI_Isend": "dest", "MPI_Recv": "source", "MPI_Irecv": "source"}.get(e["name"])
        assert role is None or role in e.get("args", {}), f"{e['name']} without its {role}: {e}"
    assert len(finishes) == len(starts), f"{len(starts)} flows started, {len(finishes)} finished"
    print(f"{len(finishes)} flow arrows")
PY
echo "No Errors"
