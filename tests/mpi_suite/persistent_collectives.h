// MPI 4.0's persistent collectives by the name the MPI in use declares them
// under: standard names from MPI 4.0 (MPICH 4) and in Open MPI 5, MPIX_
// extensions (mpi-ext.h) in Open MPI 4.1.
#pragma once

#include <mpi.h>
#if defined(OPEN_MPI)
#include <mpi-ext.h>
#endif

#if MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
#define SUITE_PERSISTENT(name) MPI_##name
#else
#define SUITE_PERSISTENT(name) MPIX_##name
#endif
