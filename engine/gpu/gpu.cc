// Backend selection (FERRY_DEVICE), pointer classification and copies that
// dispatch to whichever backend owns the memory.
#include "engine/gpu/gpu.h"

#include <cstring>
#include <mutex>

#include "engine/common/params.h"
#ifdef FERRY_HAVE_CUDA
#include "engine/gpu/cuda_probe.h"
#endif
#ifdef FERRY_HAVE_HIP
#include "engine/gpu/hip_probe.h"
#endif

namespace ferry::gpu {

const char* backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCuda: return "cuda";
    case BackendKind::kEmulated: return "emulated";
    case BackendKind::kHip: return "hip";
    case BackendKind::kNone: break;
  }
  return "none";
}

std::int32_t backend_id(const Backend* backend) {
  return backend ? static_cast<std::int32_t>(backend->kind()) : kNoBackendId;
}

#ifndef FERRY_HAVE_CUDA
Backend* cuda_backend() { return nullptr; }
std::string cuda_unavailable_reason() {
  return "this build of Ferry has no CUDA backend (no CUDA toolkit when it was built)";
}
std::uint64_t cuda_graph_copies() { return 0; }
#endif
#ifndef FERRY_HAVE_HIP
Backend* hip_backend() { return nullptr; }
std::string hip_unavailable_reason() {
  return "this build of Ferry has no HIP backend (configure with -DFERRY_GPU=hip)";
}
#endif

namespace {
// The GPU backend FERRY_DEVICE=auto takes when it finds a device: the one
// this build has (a build has CUDA or HIP, not both).
Backend* gpu_backend() {
  if (Backend* cuda = cuda_backend()) return cuda;
  return hip_backend();
}
}  // namespace

Backend* active_backend() {
  static Backend* backend = [] () -> Backend* {
    const std::string& wanted = params().device;
    if (wanted == "emulated") return emulated_backend();
    if (wanted == "cuda") return cuda_backend();  // null: device_setting_problem() says why
    if (wanted == "hip") return hip_backend();
    if (wanted != "auto")
      FERRY_WARN(Gpu, "FERRY_DEVICE=%s is not auto, cuda, hip or emulated; using auto", wanted.c_str());
    if (Backend* gpu = gpu_backend()) return gpu;
    FERRY_INFO(Gpu, "no GPU: using the emulated device");
    return emulated_backend();
  }();
  return backend;
}

std::string device_setting_problem() {
  const std::string& wanted = params().device;
  if ((wanted != "cuda" && wanted != "hip") || active_backend()) return "";
  return "FERRY_DEVICE=" + wanted + ", but " + (wanted == "cuda" ? cuda_unavailable_reason() : hip_unavailable_reason()) +
         "; device allocations (ferry_device_malloc, MPI_Alloc_mem with cuda:device) fail";
}

namespace {
thread_local CallBuffers* t_innermost_call = nullptr;
}  // namespace

CallBuffers::CallBuffers() : outer_(t_innermost_call) { t_innermost_call = this; }
CallBuffers::~CallBuffers() { t_innermost_call = outer_; }

const PointerInfo* CallBuffers::known(const void* ptr) {
  for (const CallBuffers* scope = t_innermost_call; scope; scope = scope->outer_)
    for (int i = 0; i < scope->count_; ++i)
      if (scope->pointers_[i] == ptr) return &scope->infos_[i];
  return nullptr;
}

PointerInfo CallBuffers::remember(const void* ptr) {
  const PointerInfo info = classify(ptr);
  CallBuffers* scope = t_innermost_call;
  if (scope && scope->count_ < kMaxPointers && !known(ptr)) {
    scope->pointers_[scope->count_] = ptr;
    scope->infos_[scope->count_++] = info;
  }
  return info;
}

PointerInfo classify(const void* ptr) {
  if (const PointerInfo* known = CallBuffers::known(ptr)) return *known;
  PointerInfo info;
  if (emulated_backend()->query_pointer(ptr, &info)) return info;
#ifdef FERRY_HAVE_CUDA
  if (cuda_query_pointer(ptr, &info)) return info;
#endif
#ifdef FERRY_HAVE_HIP
  if (hip_query_pointer(ptr, &info)) return info;
#endif
  return info;
}

Backend* owner_backend(const PointerInfo& info) {
  switch (info.owner) {
    case BackendKind::kEmulated: return emulated_backend();
    case BackendKind::kCuda: return cuda_backend();
    case BackendKind::kHip: return hip_backend();
    case BackendKind::kNone: break;
  }
  return nullptr;
}

std::atomic<bool> g_device_runtime_seen{false};
LoaderWatch g_runtime_watch;

bool probe_device_runtime() {
#if defined(FERRY_HAVE_CUDA)
  if (!cuda_driver_loaded()) return false;
  g_device_runtime_seen.store(true, std::memory_order_relaxed);
  return true;
#elif defined(FERRY_HAVE_HIP)
  // libferry.so links the HIP runtime itself, so its presence says nothing
  // of the application: an AMD GPU that HIP can use is what counts (asked
  // once; HIP is not started where the amdgpu driver is missing).
  static std::mutex looking;
  std::lock_guard<std::mutex> lock(looking);
  g_runtime_watch.mark();  // nothing to look for again until the loader adds objects
  if (!hip_device_present(nullptr, nullptr)) return false;
  g_device_runtime_seen.store(true, std::memory_order_relaxed);
  return true;
#else
  return false;
#endif
}

Status copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return Status::kOk;
  CallBuffers classified;  // the backend's copy asks again
  const PointerInfo d = CallBuffers::remember(dst);
  const PointerInfo s = CallBuffers::remember(src);
  if (d.owner == BackendKind::kEmulated || s.owner == BackendKind::kEmulated) {
    if (d.owner == BackendKind::kCuda || s.owner == BackendKind::kCuda || d.owner == BackendKind::kHip ||
        s.owner == BackendKind::kHip)
      return Status::kUnsupported;
    return emulated_backend()->copy(dst, src, bytes);
  }
  if (d.owner == BackendKind::kCuda || s.owner == BackendKind::kCuda) {
    Backend* cuda = cuda_backend();
    return cuda ? cuda->copy(dst, src, bytes) : Status::kUnavailable;
  }
  if (d.owner == BackendKind::kHip || s.owner == BackendKind::kHip) {
    Backend* hip = hip_backend();
    return hip ? hip->copy(dst, src, bytes) : Status::kUnavailable;
  }
  std::memmove(dst, src, bytes);
  return Status::kOk;
}

}  // namespace ferry::gpu
