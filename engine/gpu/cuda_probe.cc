#include "engine/gpu/cuda_probe.h"

#include <cuda.h>
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <ctime>
#include <mutex>

#include "engine/common/loader_watch.h"

namespace ferry::gpu {
namespace {

using PointerGetAttributesFn = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);
using CtxGetCurrentFn = CUresult (*)(CUcontext*);
using PointerSetAttributeFn = CUresult (*)(const void*, CUpointer_attribute, CUdeviceptr);

struct DriverEntryPoints {
  PointerGetAttributesFn pointer_get_attributes = nullptr;
  CtxGetCurrentFn ctx_get_current = nullptr;
  PointerSetAttributeFn pointer_set_attribute = nullptr;
};

std::atomic<const DriverEntryPoints*> driver{nullptr};
// When the last completed look at the loader began.
std::atomic<long long> last_look_ns{-1'000'000'000};

long long coarse_now_ns() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return now.tv_sec * 1'000'000'000LL + now.tv_nsec;
}

DriverEntryPoints* resolve_entry_points(void* handle) {
  auto* entry = new DriverEntryPoints;
  entry->pointer_get_attributes = reinterpret_cast<PointerGetAttributesFn>(dlsym(handle, "cuPointerGetAttributes"));
  entry->ctx_get_current = reinterpret_cast<CtxGetCurrentFn>(dlsym(handle, "cuCtxGetCurrent"));
  entry->pointer_set_attribute = reinterpret_cast<PointerSetAttributeFn>(dlsym(handle, "cuPointerSetAttribute"));
  if (entry->pointer_get_attributes && entry->ctx_get_current && entry->pointer_set_attribute) return entry;
  delete entry;
  return nullptr;
}

const DriverEntryPoints* load_driver_if_present() {
  if (const DriverEntryPoints* d = driver.load(std::memory_order_acquire)) return d;
  // libcuda cannot be in the process if the loader added nothing since a
  // look that found none (gpu.h's device_runtime_active checks this inline).
  if (!g_runtime_watch.changed()) return nullptr;
  // Between libcuda arriving in the process and the first device pointer it
  // hands out lie driver and context start-up, tens of milliseconds at the
  // least. So a look at the loader that began under a millisecond ago and
  // found no libcuda still holds, and calls skip the loader's lock.
  const long long now = coarse_now_ns();
  if (now - last_look_ns.load(std::memory_order_acquire) < 1'000'000) return nullptr;
  static std::mutex looking;
  std::lock_guard<std::mutex> lock(looking);
  if (const DriverEntryPoints* d = driver.load(std::memory_order_acquire)) return d;
  g_runtime_watch.mark();  // first: a libcuda loaded during the look counts as new
  if (void* handle = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY))
    driver.store(resolve_entry_points(handle), std::memory_order_release);
  last_look_ns.store(now, std::memory_order_release);
  const DriverEntryPoints* found = driver.load(std::memory_order_acquire);
  // Whoever looked (a pointer query, or the per-call check), the mark above
  // now hides libcuda from the watch: the runtime flag must say it is here.
  if (found) g_device_runtime_seen.store(true, std::memory_order_relaxed);
  return found;
}

}  // namespace

bool cuda_driver_loaded() { return load_driver_if_present() != nullptr; }

bool cuda_query_pointer(const void* ptr, PointerInfo* info) {
  const DriverEntryPoints* d = load_driver_if_present();
  if (!d || !ptr) return false;
  unsigned memory_type = 0;
  unsigned is_managed = 0;
  int ordinal = -1;
  CUdeviceptr range_start = 0;
  size_t range_size = 0;
  unsigned long long buffer_id = 0;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                      CU_POINTER_ATTRIBUTE_RANGE_SIZE,       CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* values[] = {&memory_type, &is_managed, &ordinal, &range_start, &range_size, &buffer_id};
  if (d->pointer_get_attributes(6, attributes, values, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
    return false;
  if (memory_type != CU_MEMORYTYPE_DEVICE && !is_managed) return false;  // pinned host memory is host memory
  info->kind = is_managed ? MemoryKind::kManaged : MemoryKind::kDevice;
  info->owner = BackendKind::kCuda;
  info->device = ordinal;
  info->base = static_cast<std::uintptr_t>(range_start);
  info->size = range_size;
  info->allocation_id = buffer_id;
  return true;
}

bool cuda_set_sync_memops(const void* ptr) {
  const DriverEntryPoints* d = load_driver_if_present();
  const unsigned value = 1;
  return d && d->pointer_set_attribute(&value, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(ptr)) ==
                  CUDA_SUCCESS;
}

bool cuda_thread_has_context() {
  const DriverEntryPoints* d = load_driver_if_present();
  CUcontext context = nullptr;
  return d && d->ctx_get_current(&context) == CUDA_SUCCESS && context != nullptr;
}

}  // namespace ferry::gpu
