/* Device memory for the MPI suite programs.
 *
 * The programs do not link libferry.so: it arrives through LD_PRELOAD, so the
 * Ferry entry points are looked up at run time. With FERRY_SUITE_HOST_BUFFERS=1
 * plain malloc/free/memcpy stand in, so the same program runs on an unmodified
 * MPI as a baseline that proves the reference checks themselves. Device memory
 * is never dereferenced by the programs: it is reached only through
 * suite_memcpy, as real GPU memory would have to be. */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Resolves the allocator once; on failure prints why and ends the job. Call
 * after MPI_Init. */
void suite_device_init(void);
/* Never NULL: a failed allocation ends the job. */
void* suite_device_malloc(size_t bytes);
void suite_device_free(void* ptr);
/* Copies between host and device in any direction; a failure ends the job. */
void suite_memcpy(void* dst, const void* src, size_t bytes);
/* "emulated", "cuda", ... from Ferry, or "host" under FERRY_SUITE_HOST_BUFFERS. */
const char* suite_device_backend(void);
/* The device backend libferry.so reports, or NULL when it is not loaded. */
const char* suite_ferry_backend(void);
/* Whether MPI_Get_library_version names `name` ("Open MPI v5.", "MPICH"):
 * an MPI's own faults are told apart at run time. */
int suite_mpi_library_is(const char* name);
/* ferry_device_key: equal in two processes sharing a GPU; 0 without Ferry. */
unsigned long long suite_device_key(void);
/* ferry_is_device_memory: whether Ferry takes ptr for device memory; 0
 * without Ferry. */
int suite_is_device_memory(const void* ptr);

#ifdef __cplusplus
}
#endif
