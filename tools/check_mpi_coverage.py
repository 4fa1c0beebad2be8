#!/usr/bin/env python3
"""Fails when the installed MPI headers declare a function that takes a
buffer (a `void *` parameter) which mpi_shim/mpi_functions.txt does not wrap
and the allow-list below does not explain.

usage: check_mpi_coverage.py mpi_functions.txt HEADER [HEADER ...]
"""
import re
import sys
from pathlib import Path

# Functions whose `void *` is not memory the library reads or writes as
# data, with the reason each may pass through untouched.
ALLOWED = {
    # Addresses only: the library computes with the pointer, never dereferences it.
    "MPI_Get_address": "returns the address as a number",
    "MPI_Address": "deprecated MPI_Get_address",
    # Attribute values are pointer-sized values the library stores and returns.
    "MPI_Comm_get_attr": "attribute value",
    "MPI_Comm_set_attr": "attribute value",
    "MPI_Type_get_attr": "attribute value",
    "MPI_Type_set_attr": "attribute value",
    "MPI_Win_set_attr": "attribute value",
    "MPI_Attr_get": "deprecated attribute value",
    "MPI_Attr_put": "deprecated attribute value",
    # extra_state is handed back to the application's callbacks unread.
    "MPI_Comm_create_keyval": "extra_state for callbacks",
    "MPI_Type_create_keyval": "extra_state for callbacks",
    "MPI_Win_create_keyval": "extra_state for callbacks",
    "MPI_Keyval_create": "extra_state for callbacks",
    "MPI_Grequest_start": "extra_state for callbacks",
    "MPI_Register_datarep": "extra_state for callbacks",
    "MPI_Register_datarep_c": "extra_state for callbacks",
    "MPIX_Grequest_start": "extra_state for callbacks (MPICH)",
    "MPIX_Grequest_class_allocate": "extra_state for callbacks (MPICH)",
    "MPIX_Op_create_x": "extra_state for callbacks (MPICH 5)",
    "MPIX_Comm_create_errhandler_x": "extra_state for callbacks (MPICH 5)",
    "MPIX_File_create_errhandler_x": "extra_state for callbacks (MPICH 5)",
    "MPIX_Session_create_errhandler_x": "extra_state for callbacks (MPICH 5)",
    "MPIX_Win_create_errhandler_x": "extra_state for callbacks (MPICH 5)",
    "MPIX_Async_start": "extra_state for callbacks (MPICH 5)",
    "MPIX_Async_spawn": "extra_state for callbacks (MPICH 5)",
    "MPIX_Info_set_hex": "an info value, host memory",
    "MPI_Abi_get_fortran_booleans": "Fortran's logical values, host memory",
    "MPI_Abi_set_fortran_booleans": "Fortran's logical values, host memory",
    # The predefined attribute copy callback: attribute values, not data.
    "MPI_DUP_FN": "attribute values (MPICH declares the callback as a function)",
    # The tool interface's values are host variables of the MPI library's own.
    "MPI_T_cvar_handle_alloc": "object handle",
    "MPI_T_cvar_read": "a control variable's value, host memory",
    "MPI_T_cvar_write": "a control variable's value, host memory",
    "MPI_T_pvar_handle_alloc": "object handle",
    "MPI_T_pvar_read": "a performance variable's value, host memory",
    "MPI_T_pvar_write": "a performance variable's value, host memory",
    "MPI_T_pvar_readreset": "a performance variable's value, host memory",
    # MPICH 5's GPU-stream extension: calls ordered on a GPU stream of an
    # MPICH built with GPU support, whose buffers are that MPICH's to move;
    # not intercepted (README).
    **{f"MPIX_{name}{large}": "MPICH's GPU-stream extension, not intercepted"
       for name in ("Send_enqueue", "Recv_enqueue", "Isend_enqueue", "Irecv_enqueue", "Allreduce_enqueue",
                    "Stream_send", "Stream_recv", "Stream_isend", "Stream_irecv")
       for large in ("", "_c")},
    "MPI_T_event_copy": "an event's data, host memory of a tool",
    "MPI_T_event_read": "an event's data, host memory of a tool",
    "MPI_T_event_handle_alloc": "object handle",
    "MPI_T_event_handle_free": "user data for the callback",
    "MPI_T_event_register_callback": "user data for the callback",
}

# Open MPI's declarations and MPICH's (its attribute macros after the
# parameters: MPICH_ATTR_POINTER_WITH_TYPE_TAG(1,3) MPICH_API_PUBLIC).
DECLARATION = re.compile(r"\b(?:OMPI_DECLSPEC\s+)?int\s+(MPIX?_\w+)\s*\(([^)]*)\)\s*"
                         r"(?:(?:__mpi_interface\w*|MPICH_ATTR\w*)\s*\([^)]*\)\s*|(?:MPICH|ROMIO)_API_PUBLIC\s*)*;")
LISTED = re.compile(r"^\w+\s+int\s+(MPIX?_\w+)\(", re.M)


def buffer_functions(header_text):
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.S)
    text = re.sub(r"\s+", " ", text)
    found = {}
    for name, params in DECLARATION.findall(text):
        if name.startswith("MPIX_") or not name.startswith("PMPI"):
            if re.search(r"\bvoid\s*\*", params):
                found[name] = params
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    wrapped = set(LISTED.findall(Path(sys.argv[1]).read_text()))
    # MPI 4.0's persistent collectives are listed by Open MPI 4.1's MPIX_
    # names and exported under the standard ones where the MPI has those.
    wrapped |= {"MPI_" + n[len("MPIX_"):] for n in wrapped if n.startswith("MPIX_") and n.endswith("_init")}
    declared = {}
    for header in sys.argv[2:]:
        declared.update(buffer_functions(Path(header).read_text(errors="replace")))
    if not declared:
        sys.exit("no MPI function declarations found: wrong header?")
    missing = sorted(n for n in declared if n not in wrapped and n not in ALLOWED)
    stale = sorted(n for n in ALLOWED if n in wrapped)
    for name in missing:
        print(f"not wrapped: {name}({declared[name]})")
    for name in stale:
        print(f"wrapped but also allowed to pass through: {name}")
    print(f"{len(declared)} functions take a buffer: {len(declared) - len(missing)} wrapped or allowed, "
          f"{len(missing)} missing")
    sys.exit(1 if missing or stale else 0)


if __name__ == "__main__":
    main()
