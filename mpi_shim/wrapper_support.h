// What the generated wrappers need besides the handlers.
#pragma once

#include <mpi.h>

#include "function_ids.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {

// An exception escaped a handler (in practice std::bad_alloc): report it as
// the MPI error class it maps to, through comm's error handler.
int fail_from_wrapper(MPI_Comm comm, FunctionId id);

int fail_from_wrapper_win(MPI_Win win, FunctionId id);
int fail_from_wrapper_file(MPI_File file, FunctionId id);

// An error code of error_class whose string (MPI_Error_string, the message of
// MPI_ERRORS_ARE_FATAL) is text. MPICH gives a code of a predefined class
// made this way a garbled string: there, error_class itself.
int error_code_saying(int error_class, const char* text);

// Reports an error class through comm's error handler and returns it, as the
// real MPI does for its own errors.
int raise_error(MPI_Comm comm, int error_class);
// The same through a window's error handler.
int raise_win_error(MPI_Win win, int error_class);
// The same through a file's error handler (MPI_FILE_NULL: the default one for
// files, MPI_ERRORS_RETURN unless the application changed it).
int raise_file_error(MPI_File file, int error_class);

}  // namespace ferry::shim
