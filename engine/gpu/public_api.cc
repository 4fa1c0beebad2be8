// The C API of include/ferry/ferry.h, over the active device backend.
#include "ferry/ferry.h"

#include <unistd.h>

#include "engine/gpu/gpu.h"

#define FERRY_EXPORT extern "C" __attribute__((visibility("default")))

FERRY_EXPORT void* ferry_device_malloc(size_t bytes) {
  try {
    ferry::gpu::Backend* backend = ferry::gpu::active_backend();
    void* ptr = nullptr;
    if (!backend || bytes == 0 || !ferry::ok(backend->device_alloc(bytes, &ptr))) return nullptr;
    return ptr;
  } catch (...) {
    return nullptr;
  }
}

FERRY_EXPORT void ferry_device_free(void* ptr) {
  try {
    if (!ptr) return;
    const ferry::gpu::PointerInfo info = ferry::gpu::classify(ptr);
    if (info.owner == ferry::gpu::BackendKind::kEmulated) {
      FERRY_LOG_IF_FAILED(ferry::gpu::emulated_backend()->device_free(ptr));
    } else if (ferry::gpu::Backend* cuda = ferry::gpu::cuda_backend()) {
      FERRY_LOG_IF_FAILED(cuda->device_free(ptr));
    }
  } catch (...) {
  }
}

FERRY_EXPORT int ferry_memcpy(void* dst, const void* src, size_t bytes) {
  try {
    if (bytes == 0) return 0;
    if (!dst || !src) return 1;
    return ferry::ok(ferry::gpu::copy(dst, src, bytes)) ? 0 : 1;
  } catch (...) {
    return 1;
  }
}

FERRY_EXPORT const char* ferry_device_backend(void) {
  try {
    ferry::gpu::Backend* backend = ferry::gpu::active_backend();
    return ferry::gpu::backend_kind_name(backend ? backend->kind() : ferry::gpu::BackendKind::kNone);
  } catch (...) {
    return "none";
  }
}

FERRY_EXPORT int ferry_is_device_memory(const void* ptr) {
  return ferry::gpu::classify(ptr).kind == ferry::gpu::MemoryKind::kDevice ? 1 : 0;
}

FERRY_EXPORT unsigned long long ferry_device_key(void) {
  try {
    ferry::gpu::Backend* backend = ferry::gpu::active_backend();
    if (!backend) return 0;
    // Emulated devices are never shared: the process's own id tells them apart.
    if (backend->kind() == ferry::gpu::BackendKind::kEmulated)
      return (1ull << 63) | static_cast<unsigned long long>(gethostid() & 0xffffffff) << 24 |
             static_cast<unsigned long long>(getpid() & 0xffffff);
    int device = 0;
    if (!ferry::ok(backend->current_device(&device))) return 0;
    return backend->device_key(device);
  } catch (...) {
    return 0;
  }
}
