#!/usr/bin/env python3
"""Fails when a source file includes across a boundary of Ferry's layers.

Rules (README, Layout):
  - the engine is MPI-free: nothing under engine/ includes mpi.h except the
    MPI bootstrap (engine/bootstrap/mpi_bootstrap.*);
  - the shim reaches transports only through the engine: nothing under
    mpi_shim/ includes engine/transport/;
  - one-sided windows stand beside the collectives: nothing under
    engine/pgas/ includes engine/collectives/.

MOVING lists the includes that break a rule today and are still to move; an
entry that no longer breaks it must leave the list, so it only shrinks.

usage: check_layering.py SOURCE_ROOT
"""
import re
import sys
from pathlib import Path

RULES = [
    # (files the rule covers, include pattern they must not use, files exempt, why)
    ("engine/", re.compile(r"^(mpi\.h)$"), ("engine/bootstrap/mpi_bootstrap.",), "the engine is MPI-free"),
    ("mpi_shim/", re.compile(r"^engine/transport/"), (), "the shim talks to the engine, not to transports"),
    ("engine/pgas/", re.compile(r"^engine/collectives/"), (), "windows do not depend on collectives"),
]

MOVING = {
    ("mpi_shim/nonblocking_engine.cc", "engine/transport/p2p.h"),
    ("mpi_shim/nonblocking_engine.cc", "engine/transport/shm.h"),
    ("mpi_shim/peer_pt2pt.cc", "engine/transport/p2p.h"),
    ("engine/pgas/window.h", "engine/collectives/communicator.h"),
    ("engine/pgas/window.cc", "engine/collectives/executor.h"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
SOURCES = (".h", ".cc", ".cu", ".cuh", ".c")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    broken, seen = [], set()
    covered_dirs = sorted({covered for covered, _, _, _ in RULES})
    paths = sorted({p for d in covered_dirs for p in (root / d).rglob("*")})
    for path in paths:
        if path.suffix not in SOURCES or not path.is_file():
            continue
        name = path.relative_to(root).as_posix()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            found = INCLUDE.match(line)
            if not found:
                continue
            included = found.group(1)
            for covered, pattern, exempt, why in RULES:
                if not name.startswith(covered) or name.startswith(exempt) or not pattern.search(included):
                    continue
                if (name, included) in MOVING:
                    seen.add((name, included))
                else:
                    broken.append(f"{name}:{number}: includes {included}: {why}")
    for name, included in sorted(MOVING - seen):
        broken.append(f"{name} no longer includes {included}: remove it from MOVING in {Path(__file__).name}")
    for line in broken:
        print(line)
    if not broken:
        print(f"layering: {len(RULES)} rules hold ({len(MOVING)} includes still to move)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
