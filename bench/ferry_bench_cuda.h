// The CUDA runtime calls of ferry-bench, behind one switch. Built with the
// CUDA toolkit (FERRY_BENCH_HAVE_CUDA) they are real. Built without it they
// throw, and ferry-bench never reaches them: it then times with the host clock
// only and has no NCCL column.
#ifndef FERRY_BENCH_CUDA_H
#define FERRY_BENCH_CUDA_H

#include <cstddef>
#include <stdexcept>
#include <string>

#ifdef FERRY_BENCH_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ferry_bench::cuda {

#ifdef FERRY_BENCH_HAVE_CUDA

constexpr bool kCompiled = true;
using Stream = cudaStream_t;

inline void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
}

// libferry.so allocates through its own copy of the CUDA runtime; both use
// the device's primary context, so the device chosen here, before the first
// allocation, is where Ferry's memory lands too.
inline void use_device_of_local_rank(int local_rank) {
  int device_count = 0;
  check(cudaGetDeviceCount(&device_count), "cudaGetDeviceCount");
  check(cudaSetDevice(local_rank % device_count), "cudaSetDevice");
}

// Ferry's engine runs on blocking streams, so events on the legacy default
// stream are ordered against its work, as an application's kernels would be.
inline Stream legacy_stream() { return cudaStreamLegacy; }

inline Stream create_stream() {
  Stream stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return stream;
}
inline void destroy_stream(Stream stream) { cudaStreamDestroy(stream); }
inline void synchronize(Stream stream) { check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }

inline void* pinned_alloc(std::size_t bytes) {
  void* ptr = nullptr;
  check(cudaMallocHost(&ptr, bytes), "cudaMallocHost");
  return ptr;
}
inline void pinned_free(void* ptr) { cudaFreeHost(ptr); }

// Same contract as ferry_memcpy (0 on success), so either can do the staging.
inline int copy(void* dst, const void* src, std::size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) == cudaSuccess ? 0 : 1;
}

// Two events around one operation on one stream.
class EventTimer {
 public:
  EventTimer() {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(Stream stream) { check(cudaEventRecord(start_, stream), "cudaEventRecord"); }
  void stop(Stream stream) { check(cudaEventRecord(stop_, stream), "cudaEventRecord"); }
  double elapsed_us() {
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms * 1000.0;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

#else

constexpr bool kCompiled = false;
using Stream = void*;

[[noreturn]] inline void not_built() { throw std::logic_error("ferry-bench was built without the CUDA toolkit"); }

inline void use_device_of_local_rank(int) { not_built(); }
inline Stream legacy_stream() { not_built(); }
inline void* pinned_alloc(std::size_t) { not_built(); }
inline void pinned_free(void*) { not_built(); }
inline int copy(void*, const void*, std::size_t) { not_built(); }

class EventTimer {
 public:
  EventTimer() { not_built(); }
  void start(Stream) { not_built(); }
  void stop(Stream) { not_built(); }
  double elapsed_us() { not_built(); }
};

#endif

}  // namespace ferry_bench::cuda

#endif  // FERRY_BENCH_CUDA_H
