#!/usr/bin/env python3
"""Fails when a source file crosses a boundary between Ferry's parts.

Rules (README, Layout):
  - the engine is MPI-free: nothing under engine/ includes mpi.h except the
    MPI bootstrap and the network it opens (engine/bootstrap/mpi_*);
  - the shim reaches transports only through the engine: nothing under
    mpi_shim/ includes engine/transport/;
  - one-sided windows stand beside the collectives: nothing under
    engine/pgas/ includes engine/collectives/;
  - the engine core (peer groups, transports, executors) and what it stands
    on (bootstrap, topology, GPU backends, common) know nothing of the
    collectives or windows built on them;
  - which GPU backend runs is engine/gpu's business: no code elsewhere in the
    engine or the shim names a gpu::BackendKind or asks a backend its kind()
    (it asks what the backend can do);
  - FERRY_ROUTE is read in mpi_shim/route.cc only.

MOVING lists the includes that break a rule today and are still to move; an
entry that no longer breaks it must leave the list, so it only shrinks.
Code rules have no such list.

usage: check_layering.py SOURCE_ROOT
"""
import re
import sys
from pathlib import Path

# (what is matched: an include's path or a line of code without its //
# comment; files the rule covers; pattern; files exempt; why)
RULES = [
    ("include", ("engine/",), re.compile(r"^(mpi\.h)$"), ("engine/bootstrap/mpi_bootstrap.", "engine/bootstrap/mpi_network."),
     "the engine is MPI-free"),
    ("include", ("mpi_shim/",), re.compile(r"^engine/transport/"), (),
     "the shim talks to the engine, not to transports"),
    ("include", ("engine/pgas/",), re.compile(r"^engine/collectives/"), (), "windows do not depend on collectives"),
    ("include", ("engine/core/", "engine/transport/", "engine/bootstrap/", "engine/topology/", "engine/gpu/",
                 "engine/common/"), re.compile(r"^engine/(collectives|pgas)/"), (),
     "the core does not depend on what is built on it"),
    ("code", ("engine/", "mpi_shim/"), re.compile(r"BackendKind::|\bkind\(\)"), ("engine/gpu/",),
     "ask the backend what it can do, not which it is"),
    ("code", ("engine/", "mpi_shim/"), re.compile(r"params\(\)\.route\b"), ("mpi_shim/route.cc",),
     "FERRY_ROUTE is read in route.cc (forced_route)"),
]

MOVING = set()

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
SOURCES = (".h", ".cc", ".cu", ".cuh", ".c")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    broken, seen = [], set()
    covered_dirs = sorted({d for _, covered, _, _, _ in RULES for d in covered})
    paths = sorted({p for d in covered_dirs for p in (root / d).rglob("*")})
    for path in paths:
        if path.suffix not in SOURCES or not path.is_file():
            continue
        name = path.relative_to(root).as_posix()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            found = INCLUDE.match(line)
            included = found.group(1) if found else None
            code = line.split("//", 1)[0]
            for what, covered, pattern, exempt, why in RULES:
                if not name.startswith(covered) or name.startswith(exempt):
                    continue
                if what == "include" and included and pattern.search(included):
                    if (name, included) in MOVING:
                        seen.add((name, included))
                    else:
                        broken.append(f"{name}:{number}: includes {included}: {why}")
                elif what == "code" and not found and pattern.search(code):
                    broken.append(f"{name}:{number}: {code.strip()}: {why}")
    for name, included in sorted(MOVING - seen):
        broken.append(f"{name} no longer includes {included}: remove it from MOVING in {Path(__file__).name}")
    for line in broken:
        print(line)
    if not broken:
        print(f"layering: {len(RULES)} rules hold ({len(MOVING)} includes still to move)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
