// The staged route: device buffers are copied to pinned host memory, the real
// MPI runs on the host copies, and outputs are copied back. Always correct,
// never the fast path. Host buffers pass through unchanged, so ranks of one
// call may mix buffer kinds freely.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/gpu/gpu.h"
#include "function_ids.h"

namespace ferry::shim {

// The bytes an MPI buffer argument touches, relative to its pointer.
struct Extent {
  std::ptrdiff_t lb = 0;   // first byte touched (true lower bound)
  std::size_t bytes = 0;   // from lb to one past the last byte touched
  bool dense = true;       // no holes: every byte in the range is data
};

// count elements of type. False when the arguments are invalid; the caller
// then hands the call to the real MPI so that it reports the error itself.
bool extent_of(std::int64_t count, MPI_Datatype type, Extent* out);
// Blocks of counts[i] elements at displs[i] * extent(type), as in the v-calls.
bool extent_of_blocks(int blocks, const int counts[], const int displs[], MPI_Datatype type, Extent* out);
// Blocks with their own types at byte displacements, as in Alltoallw.
bool extent_of_typed_blocks(int blocks, const int counts[], const int byte_displs[], const MPI_Datatype types[],
                            Extent* out);
bool extent_of_typed_blocks(int blocks, const int counts[], const MPI_Aint byte_displs[], const MPI_Datatype types[],
                            Extent* out);

class PinnedPool;

class Staging {
 public:
  // The object whose error handler reports a failure; a window's or a file's
  // by their tags (handles of different kinds may share a C type: MPICH's).
  struct OnWindow {
    MPI_Win win;
  };
  struct OnFile {
    MPI_File file;
  };
  Staging(FunctionId id, MPI_Comm comm) : id_(id), comm_(comm) {}
  // An RMA call on a window: failures go through the window's error handler.
  Staging(FunctionId id, OnWindow on) : id_(id), comm_(MPI_COMM_NULL), win_(on.win) {}
  // An I/O call on a file: failures go through the file's error handler.
  Staging(FunctionId id, OnFile on) : id_(id), comm_(MPI_COMM_NULL), file_(on.file), on_file_(true) {}
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  // A nonblocking call's staging moves from the handler's stack to its request.
  Staging(Staging&&) = default;

  // Each returns the pointer to give the real MPI: the buffer itself unless it
  // is device memory, else a host copy (positioned so extent.lb still applies).
  // MPI_BOTTOM names memory by the datatype's absolute addresses: extent.lb
  // is then the first address. Memory touched by one buffer must be all host
  // memory or one device allocation; otherwise the call fails with
  // MPI_ERR_BUFFER (failed()).
  const void* in(const void* buffer, const Extent& extent);  // copied to host now
  void* out(void* buffer, const Extent& extent);             // copied back by finish()
  void* inout(void* buffer, const Extent& extent);           // both

  // A point-to-point receive buffer. A message may be shorter than the
  // buffer, and the bytes past it must keep their values: with a type that
  // fills memory in address order only the bytes that arrived are copied
  // back (see received()), with any other the buffer goes both ways.
  void* receive(void* buffer, const Extent& extent, MPI_Datatype type);
  // The receive staged last completed with this status.
  void received(const MPI_Status& status);

  bool failed() const { return error_class_ != MPI_SUCCESS; }
  // Whether any buffer was copied to host memory (host buffers never are).
  bool staged_any() const { return !staged_.empty(); }
  // The staging failure as an MPI error class, raised through comm's (or the
  // window's) handler.
  int raise();
  // Copies outputs back when the MPI call succeeded; returns its result, or
  // the error class of a failed copy.
  int finish(int mpi_result);
  // A persistent request starts again (MPI_Start): inputs are copied from the
  // device anew and outputs will be copied back whole. Returns an MPI error
  // class, raised through comm's handler on failure.
  int restart();

 private:
  struct Staged {
    void* device;           // user's pointer + extent.lb
    void* host;             // start of the host copy
    std::size_t capacity;
    std::size_t bytes;      // the extent staged
    std::size_t copy_back;  // bytes to copy back; 0 for inputs
    PinnedPool* pool;       // holds host; of the backend that owns device
    bool copy_in;           // the device's bytes are the input (or fill holes)
    bool copy_out;
    bool prefix_receive;    // received() may shorten copy_back
  };
  void* stage(const void* buffer, const Extent& extent, bool copy_in, bool copy_out);
  bool copy_from_device(const Staged& s);

  FunctionId id_;
  MPI_Comm comm_;
  MPI_Win win_ = MPI_WIN_NULL;
  MPI_File file_ = MPI_FILE_NULL;
  bool on_file_ = false;
  int error_class_ = MPI_SUCCESS;
  std::vector<Staged> staged_;
};

// Host memory staging took (FERRY_STATS): the most pinned bytes held at once
// (in use and cached), pinned blocks allocated, and pageable blocks taken
// past FERRY_STAGING_POOL_MAX_BYTES.
struct StagingMemory {
  std::uint64_t pinned_peak_bytes = 0, pinned_allocations = 0, pageable_blocks = 0;
};
StagingMemory staging_memory();

// Frees the pinned memory cached between calls (MPI_Finalize).
void release_staging_pools();

}  // namespace ferry::shim
