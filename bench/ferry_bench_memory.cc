#include "ferry_bench_memory.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ferry_bench_cuda.h"
#include "ferry_bench_options.h"

namespace ferry_bench {
namespace {

template <typename Function>
Function find_symbol(const char* name) {
  void* symbol = dlsym(RTLD_DEFAULT, name);
  if (!symbol) throw std::runtime_error("libferry.so is not loaded: run under mpirun -x LD_PRELOAD=/path/libferry.so");
  Function function;
  std::memcpy(&function, &symbol, sizeof symbol);  // POSIX: dlsym may give a function
  return function;
}

}  // namespace

FerryApi find_ferry() {
  return {find_symbol<decltype(&ferry_device_malloc)>("ferry_device_malloc"),
          find_symbol<decltype(&ferry_device_free)>("ferry_device_free"),
          find_symbol<decltype(&ferry_memcpy)>("ferry_memcpy"),
          find_symbol<decltype(&ferry_device_backend)>("ferry_device_backend")};
}

void copy_or_throw(CopyFunction copy, void* dst, const void* src, std::size_t bytes) {
  if (copy(dst, src, bytes) != 0) throw std::runtime_error("copy of " + human_bytes(bytes) + " bytes failed");
}

DeviceBuffer::DeviceBuffer(const FerryApi& ferry, std::size_t bytes)
    : ferry_(ferry), ptr_(static_cast<float*>(ferry.device_malloc(bytes))) {
  if (!ptr_) throw std::runtime_error("ferry_device_malloc(" + human_bytes(bytes) + ") failed");
}

DeviceBuffer::~DeviceBuffer() { ferry_.device_free(ptr_); }

HostBuffer::HostBuffer(std::size_t bytes, bool pinned)
    : pinned_(pinned), ptr_(pinned ? cuda::pinned_alloc(bytes) : std::malloc(bytes)) {
  if (!ptr_) throw std::runtime_error("host allocation of " + human_bytes(bytes) + " failed");
}

HostBuffer::~HostBuffer() { pinned_ ? cuda::pinned_free(ptr_) : std::free(ptr_); }

}  // namespace ferry_bench
