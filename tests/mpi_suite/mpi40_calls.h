// MPI 4.0's calls where the MPI in use has them: MPICH 4 and 5 (MPI 4.0 and
// 4.1) and Open MPI 5 (which still says MPI 3.1) have them under their
// standard names; Open MPI 4.1 has only the persistent collectives, as MPIX_
// extensions (mpi-ext.h).
#pragma once

#include <mpi.h>
#if defined(OPEN_MPI)
#include <mpi-ext.h>
#endif

#if MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
#define SUITE_MPI_40 1
#define SUITE_PERSISTENT(name) MPI_##name
#else
#define SUITE_MPI_40 0
#define SUITE_PERSISTENT(name) MPIX_##name
#endif
