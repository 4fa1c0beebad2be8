// MPI_Iallreduce, MPI_Ibcast and MPI_Ialltoallv on the engine. The call
// stays local, as MPI wants: each rank writes whether it can take the
// engine for the call (its buffers on the engine's device; for Ibcast's
// root and Ialltoallv's senders, the exported buffer the peers will pull
// from) into a board in host shared memory (engine/collectives/call_board.h)
// and returns a generalized request. Ferry's progress thread reads the peers' entries and, once every
// rank can, queues the work on the GPU (the copy-engine push allreduce;
// copy-engine pulls from the peers' buffers for bcast and alltoallv): no
// MPI call is needed for it to move, so it overlaps the application's
// computation. A rank whose buffers the peers pull from completes once
// they say (on the board) that they have read them. Where ranks share a GPU
// and its leader does their device work (Communicator::gpu_leader), the
// leaders queue it for their GPU's ranks (Iallreduce too, as a direct
// reduce) and every rank completes once every leader says it is through.
// When some rank cannot (host buffers there),
// every rank runs the call through the real MPI on a duplicate of the
// communicator (device buffers staged), posted by the next MPI call the
// application makes. The generalized request is tracked in the request
// registry (request_registry.h): the completion calls settle it, completing
// it for the real MPI once the work is done.
//
// The first such call on a communicator sets it up, collectively, as the
// first blocking device collective does; later calls are local.
#pragma once

#include <mpi.h>

#include <utility>
#include <vector>

namespace ferry::shim::nbc {

// MPI_Iallreduce by this path: false when it does not take the call
// (FERRY_NBC=staged, no device runtime, a type, op or communicator the
// engine does not reduce; the same answer on every rank), and the caller
// stages it as before. Otherwise *result is the call's MPI result.
bool start_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                     MPI_Comm comm, MPI_Request* request, int* result);
// The same for MPI_Ibcast and MPI_Ialltoallv (any types; those the engine
// cannot copy as bytes, or different on the two sides, take the fallback).
bool start_bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request* request,
                 int* result);
bool start_alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                     void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm,
                     MPI_Request* request, int* result);

// Does what waits for an MPI thread (fallback calls to post, their
// requests to test); run by every completion call.
void progress();

// Before a blocking allreduce on comm runs on the engine: every earlier
// nonblocking one of comm is queued or posted (they share the copy-engine
// push's sequence, which every rank must take in the same order).
void issue_all(MPI_Comm comm);

// The communicator is being freed: its calls are finished first.
void forget(MPI_Comm comm);

// At MPI_Finalize: finishes what is outstanding and stops the thread.
void finalize();

// Persistent collectives (Open MPI 4.1's MPIX_Allreduce_init,
// MPIX_Bcast_init, MPIX_Alltoallv_init: MPI 4.0's, under mpi-ext.h). The
// handle is a real persistent request of the MPI's, a receive from
// MPI_PROC_NULL, which the real MPI completes as soon as it is started; it
// stands for the call's arguments. MPI_Start makes the call as the
// nonblocking one (on the engine where it can) behind the handle, and the
// completion calls hold the handle back from the real MPI until that call
// is done. The handle never changes, as with MPI's own; it is tracked in
// the request registry until MPI_Request_free, which refuses an active one
// (MPI_ERR_REQUEST).
int init_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                   MPI_Request* request);
int init_bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request* request);
int init_alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                   void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request* request);

}  // namespace ferry::shim::nbc
