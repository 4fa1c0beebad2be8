#!/usr/bin/env python3
"""Generates libferry's Fortran bindings from mpi_functions.txt.

Open MPI's Fortran layer (mpif.h, `use mpi`, `use mpi_f08`) calls the real
MPI's PMPI_* functions directly, so a C MPI_* wrapper never sees a Fortran
call. Every function of the list therefore gets a Fortran binding
here: it converts the Fortran arguments (handles, statuses, LOGICALs,
one-based indices, the MPI_BOTTOM / MPI_IN_PLACE / MPI_STATUS(ES)_IGNORE
sentinels, CHARACTER arguments), calls libferry's own C wrapper, and sets
ierror from its result. Each binding is exported under the four manglings
Fortran compilers use (mpi_allreduce, mpi_allreduce_, mpi_allreduce__,
MPI_ALLREDUCE), the same of its profiling name (pmpi_allreduce_, ...), and
the symbol the MPI's `use mpi_f08` layer calls (Open MPI: ompi_allreduce_f).

MPICH's mpif.h and `use mpi` layers call the C MPI_* functions (Ferry's
wrappers), and so do its `use mpi_f08` bindings of calls with a buffer; its
`use mpi_f08` bindings of the others call PMPI_* directly. Under MPICH each
call without a buffer therefore gets a binding under its f08 name
(mpi_wait_f08_) instead, whose statuses are `TYPE(MPI_Status)` and whose
ierror may be absent.

Emits fortran_wrappers.cc into the build folder (mpi_flavour.h says which
bindings a build has).
"""
import sys
from pathlib import Path

from gen_wrappers import FAILURE_REPORTERS, guarded, parse

# Handle types: the suffix of their PMPI_<kind>_f2c / _c2f conversions and
# their null handle.
HANDLES = {
    "MPI_Comm": ("Comm", "MPI_COMM_NULL"),
    "MPI_Datatype": ("Type", "MPI_DATATYPE_NULL"),
    "MPI_Op": ("Op", "MPI_OP_NULL"),
    "MPI_Info": ("Info", "MPI_INFO_NULL"),
    "MPI_Win": ("Win", "MPI_WIN_NULL"),
    "MPI_Group": ("Group", "MPI_GROUP_NULL"),
    "MPI_File": ("File", "MPI_FILE_NULL"),
    "MPI_Message": ("Message", "MPI_MESSAGE_NULL"),
    "MPI_Request": ("Request", "MPI_REQUEST_NULL"),
    "MPI_Session": ("Session", "MPI_SESSION_NULL"),  # MPI 4.0
}

# Handle arguments a call reads as well as writes; every other handle passed
# by address is the call's output only.
IN_OUT_HANDLES = {
    ("Wait", "request"), ("Test", "request"), ("Start", "request"), ("Cancel", "request"),
    ("Request_free", "request"), ("Comm_free", "comm"), ("Win_free", "win"),
    ("Mrecv", "message"), ("Imrecv", "message"),
}

# Pointer arguments that are no buffer: where the call stores an address
# (Fortran passes an INTEGER(KIND=MPI_ADDRESS_KIND) or a TYPE(C_PTR)).
ADDRESS_OUTPUTS = {"baseptr"}

# Bindings written by hand in fortran_support.cc (their Fortran form is not a
# translation of the C one); the generator gives them their names.
HAND_WRITTEN = {
    # Fortran gets the attribute's value, C a pointer to it.
    "Win_get_attr": "MPI_Fint *win, MPI_Fint *win_keyval, MPI_Aint *attribute_val, MPI_Fint *flag, MPI_Fint *ierror",
    # Fortran cannot receive the buffer's address.
    "Buffer_detach": "void *buffer, MPI_Fint *size, MPI_Fint *ierror",
}

# MPICH's Fortran layers by hand: its MPI_WIN_GET_ATTR asks its own attribute
# store, past the C function (mpif.h, `use mpi` and `use mpi_f08` alike);
# its `use mpi_f08` MPI_Buffer_detach gets the address as a TYPE(C_PTR).
F08_HAND_WRITTEN = {
    "Win_get_attr": ("Win_get_attr", "MPI_Fint *win, MPI_Fint *win_keyval, MPI_Aint *attribute_val, "
                                     "MPI_Fint *flag, MPI_Fint *ierror", True),
    "Buffer_detach": ("F08Buffer_detach", "void **buffer_addr, MPI_Fint *size, MPI_Fint *ierror", False),
}

# Not bound: MPI 4.1's detach calls hand back an address Fortran cannot
# receive as C does (MPI_Buffer_detach's binding is hand-written), and no
# MPI here has both MPI 4.1 and Ferry's Fortran bindings (Open MPI's).
NOT_BOUND = {"Comm_detach_buffer", "Session_detach_buffer"}

# Open MPI's Fortran layer has a second name for calls whose address
# argument may be a TYPE(C_PTR); the same binding serves both.
CPTR_VARIANTS = {"Alloc_mem", "Win_allocate", "Win_allocate_shared", "Win_shared_query"}


def takes_buffer(function):
    return any(p.type.replace("FERRY_MPI41_CONST ", "const ") in ("void *", "const void *")
               and p.name not in ADDRESS_OUTPUTS for p in function.params)


class Binding:
    """The Fortran form of one C signature; f08: as MPICH's `use mpi_f08`
    calls it (statuses of type MPI_Status)."""

    def __init__(self, function, f08=False):
        self.f = function
        self.status_kind = "F08Status" if f08 else "Status"
        self.status_type = "MPI_F08_status" if f08 else "MPI_Fint"
        self.params = []     # Fortran parameter declarations
        self.hidden = []     # hidden CHARACTER lengths, after ierror
        self.before = []     # statements before the C call
        self.args = []       # the C call's arguments
        self.after = []      # statements after it (result in `result`)
        count_param = next((p.name for p in function.params
                            if p.type == "int" and p.name in ("count", "incount")), None)
        comm = next((p.name for p in function.params if p.type == "MPI_Comm"), None)
        for p in function.params:
            self.translate(p, count_param, comm)

    def translate(self, p, count, comm):
        name, t = p.name, p.type.replace("FERRY_MPI41_CONST ", "const ")
        if name in ("argc", "argv"):
            self.args.append("nullptr")
        elif t in ("void *", "const void *"):
            self.params.append(f"void *{name}")
            self.args.append(name if name in ADDRESS_OUTPUTS else f"fortran::buffer({name})")
        elif t in ("int", "MPI_Aint", "MPI_Offset", "MPI_Count"):
            self.params.append(f"{'MPI_Fint' if t == 'int' else t} *{name}")
            self.args.append(f"*{name}")
        elif t in HANDLES:
            kind, _ = HANDLES[t]
            self.params.append(f"MPI_Fint *{name}")
            self.args.append(f"PMPI_{kind}_f2c(*{name})")
        elif t.endswith("*") and t[:-1].strip() in HANDLES and not p.array:
            self.handle_pointer(p, t[:-1].strip())
        elif t == "MPI_Status *" and p.array:
            self.params.append(f"{self.status_type} *{name}")
            filled = "*outcount" if any(q.name == "outcount" for q in self.f.params) else f"*{count}"
            self.before.append(f"fortran::{self.status_kind}es c_{name}({name}, *{count});")
            self.args.append(f"c_{name}.c()")
            self.after.append(f"c_{name}.give_back(result, {filled});")
        elif t == "MPI_Status *":
            self.params.append(f"{self.status_type} *{name}")
            self.before.append(f"fortran::{self.status_kind} c_{name}({name});")
            self.args.append(f"c_{name}.c()")
            self.after.append(f"c_{name}.give_back(result);")
        elif t == "MPI_Request *" and p.array:
            self.params.append(f"MPI_Fint *{name}")
            self.before.append(f"fortran::Requests c_{name}({name}, *{count});")
            self.args.append(f"c_{name}.c()")
            self.after.append(f"c_{name}.give_back(result);")
        elif t == "const MPI_Datatype *" and p.array:
            self.params.append(f"MPI_Fint *{name}")
            length = (f"fortran::neighbor_type_count(PMPI_Comm_f2c(*{comm}), {str(name == 'sendtypes').lower()})"
                      if "Neighbor" in self.f.short else f"fortran::type_count(PMPI_Comm_f2c(*{comm}))")
            self.before.append(f"fortran::Types c_{name}({name}, {length});")
            self.args.append(f"c_{name}.c()")
        elif t in ("const int *", "const MPI_Aint *") and p.array:
            self.params.append(f"{'MPI_Fint' if t == 'const int *' else 'MPI_Aint'} *{name}")
            self.args.append(name)
        elif t == "int *" and p.array:  # array_of_indices: one-based in Fortran
            self.params.append(f"MPI_Fint *{name}")
            self.args.append(name)
            self.after.append(f"if (result == MPI_SUCCESS) fortran::one_based({name}, *outcount);")
        elif t == "int *" and name == "flag":
            self.params.append(f"MPI_Fint *{name}")
            self.before.append(f"int c_{name} = 0;")
            self.args.append(f"&c_{name}")
            self.after.append(f"if (result == MPI_SUCCESS) *{name} = fortran::logical(c_{name});")
        elif t == "int *" and name == "index":
            self.params.append(f"MPI_Fint *{name}")
            self.args.append(name)
            self.after.append(f"if (result == MPI_SUCCESS) fortran::one_based({name}, 1);")
        elif t in ("int *", "MPI_Aint *"):
            self.params.append(f"{'MPI_Fint' if t == 'int *' else 'MPI_Aint'} *{name}")
            self.args.append(name)
        elif t == "const char *" and p.array:
            self.params.append(f"char *{name}")
            self.hidden.append(f"int {name}_length")
            self.before.append(f"const std::string c_{name} = fortran::text({name}, {name}_length);")
            self.args.append(f"c_{name}.c_str()")
        else:
            sys.exit(f"gen_fortran.py: MPI_{self.f.short}: no Fortran form for '{t} {name}'")

    def handle_pointer(self, p, handle_type):
        kind, null = HANDLES[handle_type]
        name = p.name
        self.params.append(f"MPI_Fint *{name}")
        initial = f"PMPI_{kind}_f2c(*{name})" if (self.f.short, name) in IN_OUT_HANDLES else null
        self.before.append(f"{handle_type} c_{name} = {initial};")
        self.args.append(f"&c_{name}")
        self.after.append(f"if (result == MPI_SUCCESS) *{name} = PMPI_{kind}_c2f(c_{name});")

    def parameter_list(self):
        return ", ".join(self.params + ["MPI_Fint *ierror"] + self.hidden)


def manglings(name):
    return [name.lower(), name.lower() + "_", name.lower() + "__", name.upper()]


def names(function, name):
    """The symbols a Fortran call of the function may reach: its names and
    their profiling names (Open MPI's `use mpi_f08` reaches the calls that
    take a LOGICAL through pmpi_*_), and the name Open MPI's `use mpi_f08`
    calls for the others (ompi_allreduce_f)."""
    prefix, rest = name.lower().split("_", 1)
    suffixes = ["", "_cptr"] if function.short in CPTR_VARIANTS else [""]
    symbols, open_mpi = [], []
    for suffix in suffixes:
        symbols += manglings(name + suffix) + manglings("P" + name + suffix)
        open_mpi.append(f"o{prefix}_{rest}{suffix}_f")
    return symbols, open_mpi


def alias_block(function, params, target):
    def declare(symbols):
        return "\n".join(f'FERRY_EXPORT void {n}({params}) __attribute__((alias("{target}")));' for n in symbols)

    def block(name):
        symbols, open_mpi = names(function, name)
        return f"{declare(symbols)}\n{declare(open_mpi)}"

    if not function.persistent_collective:
        return block(function.name)
    # Named as the C function is (mpi_flavour.h).
    return (f"#if defined(FERRY_MPI_STANDARD_PERSISTENT_COLLECTIVES)\n"
            f"{block('MPI_' + function.short)}\n#else\n{block(function.name)}\n#endif")


def body(function, binding):
    if function.short in HAND_WRITTEN:
        args = ", ".join(part.split("*")[-1].strip() for part in HAND_WRITTEN[function.short].split(","))
        return f"  fortran::{function.short}({args});"
    call = f"{function.exported}({', '.join(binding.args)})"
    lines = [f"    {s}" for s in binding.before]
    lines.append(f"    const int result = {call};")
    lines += [f"    {s}" for s in binding.after]
    lines.append("    fortran::set_error(ierror, result);")
    statements = "\n".join(lines)
    return f"""  try {{
{statements}
  }} catch (...) {{
    fortran::set_error(ierror, {failure_call(function)});
  }}"""


def failure_call(function):
    """Reports an escaped exception through the error handler of the call's
    communicator, window or file (its Fortran handle converted), as the C
    wrapper does."""
    handle = function.error_handle()
    if not handle:
        return f"fail_from_wrapper(MPI_COMM_WORLD, FunctionId::k{function.short})"
    kind = HANDLES[handle.type][0]
    return f"{FAILURE_REPORTERS[handle.type]}(PMPI_{kind}_f2c(*{handle.name}), FunctionId::k{function.short})"


def open_mpi_bindings(functions):
    parts = []
    # Fortran's large-count bindings are calls of their own; not bound here.
    for f in (f for f in functions if f.policy != "large" and f.short not in NOT_BOUND):
        if f.short in HAND_WRITTEN:
            params = HAND_WRITTEN[f.short]
            binding = None
        else:
            binding = Binding(f)
            params = binding.parameter_list()
        target = f"ferry_fortran_{f.short.lower()}"
        aliases = alias_block(f, params, target)
        parts.append(guarded(f, f"""void {target}({params}) {{
{body(f, binding)}
}}
{aliases}"""))
    return "\n\n".join(parts)


def mpich_f08_bindings(functions):
    """The calls without a buffer under MPICH's f08 names (the others reach
    Ferry's C wrappers through MPICH's own bindings)."""
    parts = []
    for short, (helper, params, mpif_h_too) in F08_HAND_WRITTEN.items():
        args = ", ".join(part.split("*")[-1].strip() for part in params.split(","))
        target = f"ferry_fortran_{short.lower()}"
        symbols = [f"mpi_{short.lower()}_f08_"] + (manglings(f"MPI_{short}") if mpif_h_too else [])
        aliases = "\n".join(f'FERRY_EXPORT void {n}({params}) __attribute__((alias("{target}")));' for n in symbols)
        parts.append(f"""void {target}({params}) {{ fortran::{helper}({args}); }}
{aliases}""")
    for f in functions:
        if (f.policy == "large" or f.short in NOT_BOUND or f.short in HAND_WRITTEN or f.persistent_collective
                or takes_buffer(f)):
            continue
        binding = Binding(f, f08=True)
        parts.append(guarded(f, f"""FERRY_EXPORT void {f.name.lower()}_f08_({binding.parameter_list()}) {{
{body(f, binding)}
}}"""))
    return "\n\n".join(parts)


def fortran_wrappers(functions):
    open_mpi = open_mpi_bindings(functions)
    mpich = mpich_f08_bindings(functions)
    return f"""// Generated by gen_fortran.py from mpi_functions.txt. Do not edit.
// Fortran bindings: each converts its arguments and calls libferry's C
// wrapper of the same function; no exception crosses into the application.
#include "mpi_shim/mpi_flavour.h"

#if defined(FERRY_FORTRAN_BINDINGS) || defined(FERRY_FORTRAN_F08_BINDINGS)

#include <string>

#include "function_ids.h"
#include "mpi_shim/fortran_support.h"
#include "mpi_shim/wrapper_support.h"

#define FERRY_EXPORT __attribute__((visibility("default")))

using namespace ferry::shim;

extern "C" {{

#if defined(FERRY_FORTRAN_BINDINGS)

{open_mpi}

#else  // FERRY_FORTRAN_F08_BINDINGS

{mpich}

#endif

}}  // extern "C"

#endif
"""


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gen_fortran.py mpi_functions.txt OUTPUT_DIR")
    text = fortran_wrappers(parse(sys.argv[1]))
    target = Path(sys.argv[2]) / "fortran_wrappers.cc"
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists() or target.read_text() != text:
        target.write_text(text)


if __name__ == "__main__":
    main()
