// The MPI library libferry.so is built against, and the little that differs
// between the two ABIs it builds for: Open MPI's (libmpi.so.40) and MPICH's
// (libmpi.so.12: MPICH, Intel MPI, Cray MPICH, MVAPICH). Everything else in
// the shim is written against the MPI standard's C interface.
#pragma once

#include <mpi.h>

#if defined(MPI_ABI_VERSION)
// The MPI 5.0 standard ABI (mpi_abi.h, libmpi_abi.so): one libferry.so for
// every MPI that implements it. MPICH 5 is the one here, so what differs for
// MPICH holds for it too.
#define FERRY_MPI_STANDARD_ABI 1
#define FERRY_MPI_MPICH 1
#elif defined(OPEN_MPI)
#include <mpi-ext.h>  // MPIX_Query_cuda_support, Open MPI 4.1's persistent collectives
#define FERRY_MPI_OPEN_MPI 1
#elif defined(MPICH)
#define FERRY_MPI_MPICH 1
#else
#error "libferry.so builds against Open MPI, an MPICH-ABI library or the MPI standard ABI"
#endif

// Ferry's Fortran bindings (gen_fortran.py). Open MPI's Fortran layers call
// PMPI_ past the C wrappers: every call is bound. MPICH's mpif.h and `use
// mpi` call the C MPI_ functions, and so does its `use mpi_f08` for calls
// with a buffer; its others go to PMPI_: those are bound under their f08
// names. None for the standard ABI, which is C's alone.
#if defined(FERRY_MPI_OPEN_MPI)
#define FERRY_FORTRAN_BINDINGS 1
#elif defined(FERRY_MPI_MPICH) && !defined(FERRY_MPI_STANDARD_ABI)
#define FERRY_FORTRAN_F08_BINDINGS 1
#endif

// MPI 4.0's persistent collectives (MPI_Allreduce_init, ...): standard names
// from MPI 4.0 (MPICH 4) and in Open MPI 5; Open MPI 4.1 has them as MPIX_
// extensions only.
#if MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
#define FERRY_MPI_STANDARD_PERSISTENT_COLLECTIVES 1
#define FERRY_PERSISTENT_COLLECTIVE(name) MPI_##name
#define FERRY_PMPI_PERSISTENT_COLLECTIVE(name) PMPI_##name
#else
#define FERRY_PERSISTENT_COLLECTIVE(name) MPIX_##name
#define FERRY_PMPI_PERSISTENT_COLLECTIVE(name) PMPIX_##name
#endif

// MPI 4.0's new calls on buffers (partitioned point-to-point, MPI_Psend_init
// and its kin; MPI_Isendrecv(_replace)): MPICH 4 and 5, Open MPI 5 (which
// still says MPI 3.1); none in Open MPI 4.1.
#if MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
#define FERRY_MPI_40 1
#endif

// MPI 4.0's large-count calls (MPI_Send_c, ...): MPICH 4 and 5, the
// standard ABI; not Open MPI 4.1 or 5.0 (which says MPI 3.1).
#if MPI_VERSION >= 4
#define FERRY_MPI_LARGE_COUNT 1
#endif

// MPI 4.1 made some array arguments const (MPI_Pready_list's partitions);
// a wrapper must declare them as the MPI's mpi.h does.
#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
#define FERRY_MPI41_CONST const
// MPI 4.1's calls on buffers: a buffered send's buffer attached to a
// communicator or a session (MPI_Comm_attach_buffer, ...). MPICH 5.
#define FERRY_MPI_41 1
#else
#define FERRY_MPI41_CONST
#endif
