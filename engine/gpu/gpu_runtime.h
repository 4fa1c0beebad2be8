// The runtime API the engine's kernel files (.cu) call on the host side, for
// both GPU runtimes from one source: nvcc sees the CUDA runtime itself;
// built as HIP (cmake -DFERRY_GPU=hip) the same CUDA names map to HIP's,
// one line each, as MSCCL++'s gpu.hpp does. Only the names those files use
// are here; the backends (cuda_backend.cc, hip_backend.cc) call their own
// runtime directly. Device-side primitives: runtime_device.cuh.
#pragma once

#if defined(__HIPCC__)
#define FERRY_GPU_HIP 1
#include <hip/hip_runtime.h>

#include <cstddef>

using cudaError_t = hipError_t;
using cudaStream_t = hipStream_t;
constexpr hipError_t cudaSuccess = hipSuccess;
constexpr hipError_t cudaErrorNotReady = hipErrorNotReady;
constexpr hipDeviceAttribute_t cudaDevAttrMultiProcessorCount = hipDeviceAttributeMultiprocessorCount;
constexpr unsigned cudaHostAllocMapped = hipHostMallocMapped;
constexpr unsigned cudaHostAllocPortable = hipHostMallocPortable;
constexpr unsigned cudaStreamNonBlocking = hipStreamNonBlocking;

inline hipError_t cudaGetLastError() { return hipGetLastError(); }
inline const char* cudaGetErrorString(hipError_t error) { return hipGetErrorString(error); }
inline hipError_t cudaGetDevice(int* device) { return hipGetDevice(device); }
inline hipError_t cudaSetDevice(int device) { return hipSetDevice(device); }
inline hipError_t cudaDeviceGetAttribute(int* value, hipDeviceAttribute_t attribute, int device) {
  return hipDeviceGetAttribute(value, attribute, device);
}
inline hipError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned flags) {
  return hipHostMalloc(ptr, bytes, flags);
}
inline hipError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags) {
  return hipHostGetDevicePointer(device_ptr, host_ptr, flags);
}
inline hipError_t cudaFreeHost(void* ptr) { return hipHostFree(ptr); }
template <typename T>
inline hipError_t cudaMalloc(T** ptr, std::size_t bytes) {
  return hipMalloc(reinterpret_cast<void**>(ptr), bytes);
}
inline hipError_t cudaFree(void* ptr) { return hipFree(ptr); }
inline hipError_t cudaMemset(void* ptr, int value, std::size_t bytes) { return hipMemset(ptr, value, bytes); }
inline hipError_t cudaStreamCreateWithFlags(hipStream_t* stream, unsigned flags) {
  return hipStreamCreateWithFlags(stream, flags);
}
inline hipError_t cudaStreamDestroy(hipStream_t stream) { return hipStreamDestroy(stream); }
inline hipError_t cudaStreamQuery(hipStream_t stream) { return hipStreamQuery(stream); }
inline hipError_t cudaStreamSynchronize(hipStream_t stream) { return hipStreamSynchronize(stream); }
template <typename Kernel>
inline hipError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel kernel, int threads,
                                                                std::size_t shared_bytes) {
  return hipOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, shared_bytes);
}
template <typename Symbol>
inline hipError_t cudaMemcpyToSymbol(const Symbol& symbol, const void* src, std::size_t bytes) {
  return hipMemcpyToSymbol(HIP_SYMBOL(symbol), src, bytes, 0, hipMemcpyHostToDevice);
}
template <typename Symbol>
inline hipError_t cudaMemcpyFromSymbol(void* dst, const Symbol& symbol, std::size_t bytes) {
  return hipMemcpyFromSymbol(dst, HIP_SYMBOL(symbol), bytes, 0, hipMemcpyDeviceToHost);
}

#else
#include <cuda_runtime.h>
#endif
