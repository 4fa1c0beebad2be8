// Backend selection (FERRY_DEVICE), pointer classification and copies that
// dispatch to whichever backend owns the memory.
#include "engine/gpu/gpu.h"

#include <cstring>

#include "engine/common/params.h"
#ifdef FERRY_HAVE_CUDA
#include "engine/gpu/cuda_probe.h"
#endif

namespace ferry::gpu {

const char* backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCuda: return "cuda";
    case BackendKind::kEmulated: return "emulated";
    case BackendKind::kNone: break;
  }
  return "none";
}

#ifndef FERRY_HAVE_CUDA
Backend* cuda_backend() { return nullptr; }
std::uint64_t cuda_graph_copies() { return 0; }
#endif

Backend* active_backend() {
  static Backend* backend = [] () -> Backend* {
    const std::string& wanted = params().device;
    if (wanted == "emulated") return emulated_backend();
    if (wanted == "cuda") {
      Backend* cuda = cuda_backend();
      if (!cuda) FERRY_WARN(Gpu, "FERRY_DEVICE=cuda but no usable CUDA device; device allocations will fail");
      return cuda;
    }
    if (wanted != "auto") FERRY_WARN(Gpu, "FERRY_DEVICE=%s is not auto, cuda or emulated; using auto", wanted.c_str());
    if (Backend* cuda = cuda_backend()) return cuda;
    FERRY_INFO(Gpu, "no GPU: using the emulated device");
    return emulated_backend();
  }();
  return backend;
}

PointerInfo classify(const void* ptr) {
  PointerInfo info;
  if (emulated_backend()->query_pointer(ptr, &info)) return info;
#ifdef FERRY_HAVE_CUDA
  if (cuda_query_pointer(ptr, &info)) return info;
#endif
  return info;
}

Backend* owner_backend(const PointerInfo& info) {
  switch (info.owner) {
    case BackendKind::kEmulated: return emulated_backend();
    case BackendKind::kCuda: return cuda_backend();
    case BackendKind::kNone: break;
  }
  return nullptr;
}

std::atomic<bool> g_device_runtime_seen{false};
LoaderWatch g_runtime_watch;

bool probe_device_runtime() {
#ifdef FERRY_HAVE_CUDA
  if (!cuda_driver_loaded()) return false;
  g_device_runtime_seen.store(true, std::memory_order_relaxed);
  return true;
#else
  return false;
#endif
}

Status copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return Status::kOk;
  const PointerInfo d = classify(dst);
  const PointerInfo s = classify(src);
  if (d.owner == BackendKind::kEmulated || s.owner == BackendKind::kEmulated) {
    if (d.owner == BackendKind::kCuda || s.owner == BackendKind::kCuda) return Status::kUnsupported;
    return emulated_backend()->copy(dst, src, bytes);
  }
  if (d.owner == BackendKind::kCuda || s.owner == BackendKind::kCuda) {
    Backend* cuda = cuda_backend();
    return cuda ? cuda->copy(dst, src, bytes) : Status::kUnavailable;
  }
  std::memmove(dst, src, bytes);
  return Status::kOk;
}

}  // namespace ferry::gpu
