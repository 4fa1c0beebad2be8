#!/usr/bin/env python3
"""Generates libferry's MPI wrappers from mpi_functions.txt.

Emits into the build folder:
  function_ids.h  enum FunctionId and the MPI names, for stats and routing
  handlers.h      declarations of the hand-written handle_<Name> functions
  wrappers.cc     the exported extern "C" MPI_* definitions
"""
import re
import sys
from pathlib import Path

# policy int MPI_Name(parameters) [if MACRO]: with "if", only where the MPI
# has the function (mpi_flavour.h defines MACRO).
SIGNATURE = re.compile(r"^(\w+)\s+(int)\s+(MPIX?_\w+)\(([^)]*)\)(?:\s+if\s+(\w+))?\s*$")


class Param:
    def __init__(self, text):
        text = text.strip()
        array = text.endswith("[]")
        if array:
            text = text[:-2].strip()
        match = re.match(r"^(.*?)([A-Za-z_]\w*)$", text)
        if not match:
            raise ValueError(f"cannot parse parameter '{text}'")
        self.type = match.group(1).strip() + (" *" if array else "")
        self.name = match.group(2)
        self.array = array

    def declaration(self):
        sep = "" if self.type.endswith("*") else " "
        return f"{self.type}{sep}{self.name}"


class Function:
    def __init__(self, policy, ret, name, params_text, guard=None):
        self.policy = policy
        self.guard = guard
        self.ret = ret
        self.name = name
        # MPIX_ names: Open MPI's extensions (mpi-ext.h), MPI 4.0 calls among them.
        self.short = name.split("_", 1)[1]
        # MPI 4.0's persistent collectives: exported under the name the MPI
        # in use declares (mpi_flavour.h).
        self.persistent_collective = name.startswith("MPIX_") and name.endswith("_init")
        if self.persistent_collective:
            self.exported = f"FERRY_PERSISTENT_COLLECTIVE({self.short})"
            self.pmpi = f"FERRY_PMPI_PERSISTENT_COLLECTIVE({self.short})"
        else:
            self.exported = name
            self.pmpi = "P" + name
        self.params = [] if params_text.strip() in ("", "void") else [Param(p) for p in params_text.split(",")]

    def parameter_list(self):
        return ", ".join(p.declaration() for p in self.params) or "void"

    def argument_list(self):
        return ", ".join(p.name for p in self.params)

    def noted_ranks(self):
        """Statements that put the ranks the call names in its trace span."""
        return "".join(f'\n    span.note_rank("{p.name}", {p.name});' for p in self.params
                       if p.type == "int" and p.name in ("dest", "source", "root"))

    def error_handle(self):
        """The parameter whose error handler reports the call's errors: its
        communicator, else its window or file; None: MPI_COMM_WORLD's."""
        for p in self.params:
            if p.type == "MPI_Comm":
                return p
        return next((p for p in self.params if p.type in ("MPI_Win", "MPI_File")), None)

    def failure_call(self):
        """Reports an escaped exception through the call's error handler."""
        handle = self.error_handle()
        if not handle:
            return f"fail_from_wrapper(MPI_COMM_WORLD, FunctionId::k{self.short})"
        return f"{FAILURE_REPORTERS[handle.type]}({handle.name}, FunctionId::k{self.short})"


# By the kind of handle whose error handler is used (wrapper_support.h):
# what reports an escaped exception, and what raises an error of Ferry's own.
FAILURE_REPORTERS = {"MPI_Comm": "fail_from_wrapper", "MPI_Win": "fail_from_wrapper_win",
                     "MPI_File": "fail_from_wrapper_file"}
ERROR_RAISERS = {"MPI_Comm": "raise_error", "MPI_Win": "raise_win_error", "MPI_File": "raise_file_error"}


def parse(path):
    functions = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = SIGNATURE.match(line)
        if not match:
            sys.exit(f"{path}:{number}: not a signature: {line}")
        policy, ret, name, params, guard = match.groups()
        if policy not in ("buffers", "pt2pt", "always", "lifecycle", "large"):
            sys.exit(f"{path}:{number}: unknown policy '{policy}'")
        functions.append(Function(policy, ret, name, params, guard))
    by_name = {f.name: f for f in functions if f.policy != "large"}
    for f in functions:
        if f.policy != "large":
            continue
        stem = f.name[:-len("_c")] if f.name.endswith("_c") else None
        f.base = by_name.get(stem) or by_name.get("MPIX_" + stem[len("MPI_"):]) if stem else None
        if not f.base:
            sys.exit(f"{path}: {f.name}: a large-count call needs its call without _c in the list")
        if len(f.params) != len(f.base.params):
            sys.exit(f"{path}: {f.name}: its parameters do not pair with {f.base.name}'s")
    return functions


# How a large-count parameter reaches its int counterpart.
WIDE = ("MPI_Count", "MPI_Aint")
# Pointer parameters that are outputs only (the call writes them).
OUTPUT_ONLY = ("size", "disp_unit")
# void * parameters that are not data the call reads or writes.
NOT_DATA = ("baseptr", "buffer_addr")


class Narrowing:
    """How a large-count call's arguments reach its call without _c: the
    statements before the call, the checks that the values fit, the
    arguments, and the outputs written back after it."""

    def __init__(self, f):
        base = f.base
        self.arrays, self.checks, self.before, self.args, self.after = [], [], [], [], []
        comm = next((p.name for p in f.params if p.type == "MPI_Comm"), None)
        root = "true, root" if any(p.name == "root" for p in f.params) else "false, 0"
        # Whose ranks an array's entries stand for (large_count.h).
        group = "kGroup"
        if base.short.startswith(("Neighbor_", "Ineighbor_")):
            group = "kNeighbours"
        elif base.short.startswith(("Reduce_scatter", "Ireduce_scatter")):
            group = "kLocalGroup"
        side = "kSend"
        for wide, narrow in zip(f.params, base.params):
            if wide.type.replace(" ", "") == narrow.type.replace(" ", ""):
                self.args.append(wide.name)
            elif wide.type in ("const " + w + " *" for w in WIDE) and narrow.type == "const int *" and comm:
                # displs takes the side of the counts before it.
                if wide.name.startswith(("send", "sdispl")):
                    side = "kSend"
                elif wide.name.startswith(("recv", "rdispl")):
                    side = "kRecv"
                local = f"{wide.name}_int"
                length = f"large_array_length(ArrayGroup::{group}, {comm}, ArraySide::{side}, {root})"
                self.arrays.append(f"    std::vector<int> {local};")
                self.arrays.append(f"    const bool {local}_fits = narrow({wide.name}, {length}, &{local});")
                self.checks.append(f"!{local}_fits")
                self.args.append(f"narrowed({wide.name}, {local})")
            elif wide.type in WIDE and narrow.type in ("int", "MPI_Aint"):
                # MPI_Count to MPI_Aint: the same width here.
                if narrow.type == "int":
                    self.checks.append(f"!fits_int({wide.name})")
                self.args.append(f"static_cast<{narrow.type}>({wide.name})")
            elif wide.type in (w + " *" for w in WIDE) and narrow.type in ("int *", "MPI_Aint *"):
                local, local_type = f"{wide.name}_narrow", narrow.type[:-2]
                if wide.name in OUTPUT_ONLY:
                    self.before.append(f"    {local_type} {local} = 0;")
                else:
                    if local_type == "int":
                        self.checks.append(f"!fits_int(*{wide.name})")
                    self.before.append(f"    {local_type} {local} = static_cast<{local_type}>(*{wide.name});")
                self.args.append(f"&{local}")
                self.after.append(f"*{wide.name} = {local};")
            else:
                sys.exit(f"{f.name}: no conversion from {wide.type} {wide.name} to {narrow.type}")


def refusal(f):
    """The condition under which a call past an int fails, and how."""
    buffers = [p.name for p in f.params
               if p.type.replace(" ", "") in ("void*", "constvoid*") and p.name not in NOT_DATA]
    conditions = []
    if buffers:
        conditions.append("names_device_memory({" + ", ".join(buffers) + "})")
    if f.base.policy == "pt2pt":
        conditions.append("ferry::shim::peer::active()")
    handle = f.error_handle()
    raise_call = (f"{ERROR_RAISERS[handle.type]}({handle.name}, count_beyond_int())" if handle
                  else "raise_error(MPI_COMM_WORLD, count_beyond_int())")
    return " || ".join(conditions), raise_call


def fast_path(policy, real_call):
    """A process with no device runtime has no device buffers: its calls go
    straight to the real MPI unless the stats want to count them. Outside
    the try block, so the compiler can make it a tail call (nothing there
    throws)."""
    if policy == "buffers":
        return f"""
  if (!observing() && !ferry::gpu::device_runtime_active()) return {real_call};"""
    if policy == "pt2pt":
        return f"""
  if (!observing() && !ferry::gpu::device_runtime_active() && !ferry::shim::peer::active())
    return {real_call};"""
    return ""


def large_wrapper(f):
    """MPI_X_c: values that fit an int go through handle_X; past that, the
    real MPI's own where the call names no device memory (and, for
    point-to-point, no message may be a marker of peer memory), else
    MPI_ERR_COUNT through the call's error handler."""
    base, n = f.base, Narrowing(f)
    real = f"P{f.name}({f.argument_list()})"
    beyond = "\n" + "\n".join(n.arrays) if n.arrays else ""
    if n.checks:
        condition, raise_call = refusal(f)
        refused = f"\n      if ({condition}) return {raise_call};" if condition else ""
        beyond += f"""
    if ({' || '.join(n.checks)}) {{{refused}
      return {real};
    }}"""
    call = f"handle_{base.short}({', '.join(n.args)})"
    if n.after:
        finish = f"""
    const int result = {call};
    if (result == MPI_SUCCESS) {{
      {' '.join(n.after)}
    }}
    return result;"""
    else:
        finish = f"\n    return {call};"
    prepared = "".join("\n" + line for line in n.before)
    return f"""extern "C" FERRY_EXPORT int {f.name}({f.parameter_list()}) {{{fast_path(base.policy, real)}
  try {{{beyond}{prepared}
    CallSpan span(FunctionId::k{base.short});{f.noted_ranks()}
    count_call(FunctionId::k{base.short});{finish}
  }} catch (...) {{
    return {base.failure_call()};
  }}
}}"""


def guarded(function, text):
    """text, compiled only where the MPI has the function."""
    if not function.guard:
        return text
    return f"#if defined({function.guard})\n{text}\n#endif"


def function_ids(functions):
    # A large-count call is counted, traced and routed as its call without _c.
    functions = [f for f in functions if f.policy != "large"]
    enum = "\n".join(f"  k{f.short}," for f in functions)
    names = "\n".join(f'    "{f.name}",' for f in functions)
    return f"""// Generated by gen_wrappers.py from mpi_functions.txt. Do not edit.
#pragma once

namespace ferry::shim {{

enum class FunctionId : int {{
{enum}
  kCount,
}};

inline const char* function_name(FunctionId id) {{
  static const char* const kNames[] = {{
{names}
  }};
  return kNames[static_cast<int>(id)];
}}

}}  // namespace ferry::shim
"""


def handlers(functions):
    decls = "\n".join(guarded(f, f"int handle_{f.short}({f.parameter_list()});") for f in functions
                      if f.policy != "large")
    return f"""// Generated by gen_wrappers.py from mpi_functions.txt. Do not edit.
#pragma once

#include "mpi_shim/mpi_flavour.h"

namespace ferry::shim {{

{decls}

}}  // namespace ferry::shim
"""


def wrappers(functions):
    bodies = []
    for f in functions:
        if f.policy == "large":
            bodies.append(guarded(f, large_wrapper(f)))
            continue
        passed = fast_path(f.policy, f"{f.pmpi}({f.argument_list()})")
        bodies.append(guarded(f, f"""extern "C" FERRY_EXPORT int {f.exported}({f.parameter_list()}) {{{passed}
  try {{
    CallSpan span(FunctionId::k{f.short});{f.noted_ranks()}
    count_call(FunctionId::k{f.short});
    return handle_{f.short}({f.argument_list()});
  }} catch (...) {{
    return {f.failure_call()};
  }}
}}"""))
    joined = "\n\n".join(bodies)
    return f"""// Generated by gen_wrappers.py from mpi_functions.txt. Do not edit.
// No exception may cross into the application: each wrapper turns one into
// an MPI error class through the communicator's error handler.
#include "mpi_shim/mpi_flavour.h"

#include "engine/gpu/gpu.h"
#include "function_ids.h"
#include "handlers.h"
#include "mpi_shim/call_span.h"
#include "mpi_shim/large_count.h"
#include "mpi_shim/peer_pt2pt.h"
#include "mpi_shim/wrapper_support.h"

#define FERRY_EXPORT __attribute__((visibility("default")))

using namespace ferry::shim;

{joined}
"""


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gen_wrappers.py mpi_functions.txt OUTPUT_DIR")
    functions = parse(sys.argv[1])
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("function_ids.h", function_ids(functions)),
                       ("handlers.h", handlers(functions)),
                       ("wrappers.cc", wrappers(functions))):
        target = out / name
        if not target.exists() or target.read_text() != text:
            target.write_text(text)


if __name__ == "__main__":
    main()
