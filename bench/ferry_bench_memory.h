// ferry-bench's memory: device buffers from the preloaded libferry.so, whose
// entry points it finds with dlsym (the binary links only MPI), and the host
// buffers that staging by hand copies through.
#pragma once

#include <cstddef>

#include "ferry/ferry.h"

namespace ferry_bench {

// Found in the preloaded libferry.so: the binary links only MPI.
struct FerryApi {
  decltype(&ferry_device_malloc) device_malloc;
  decltype(&ferry_device_free) device_free;
  decltype(&ferry_memcpy) copy;
  decltype(&ferry_device_backend) backend;
};

// Throws when libferry.so is not loaded.
FerryApi find_ferry();

using CopyFunction = int (*)(void* dst, const void* src, std::size_t bytes);

void copy_or_throw(CopyFunction copy, void* dst, const void* src, std::size_t bytes);

// Device memory from libferry.so: cudaMalloc on a GPU, emulated device memory
// otherwise. Host code never dereferences it.
class DeviceBuffer {
 public:
  DeviceBuffer(const FerryApi& ferry, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return ptr_; }

 private:
  const FerryApi& ferry_;
  float* ptr_;
};

// Host side of hand-written staging: pinned on a GPU, as a careful user would
// have it; plain memory for the emulated device.
class HostBuffer {
 public:
  HostBuffer(std::size_t bytes, bool pinned);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  bool pinned_;
  void* ptr_;
};

struct Buffers {
  float* send;
  float* recv;
};

}  // namespace ferry_bench
