// Whether an AMD GPU is there, and what HIP says of a pointer (hip_probe.h).
#include "engine/gpu/hip_probe.h"

#include <hip/hip_runtime_api.h>
#include <unistd.h>

namespace ferry::gpu {

bool hip_device_present(int* count, std::string* why_not) {
  static int devices = -1;
  static std::string reason;
  static const bool present = [] {
    // No amdgpu kernel driver: HIP cannot run, and is not started to say so.
    if (access("/dev/kfd", F_OK) != 0) {
      reason = "no AMD GPU driver (/dev/kfd is missing)";
      return false;
    }
    int n = 0;
    const hipError_t error = hipGetDeviceCount(&n);
    if (error != hipSuccess || n == 0) {
      (void)hipGetLastError();
      reason = error == hipSuccess ? std::string("the HIP runtime finds no device")
                                   : std::string("the HIP runtime cannot run: ") + hipGetErrorString(error) + " (" +
                                         hipGetErrorName(error) + ")";
      return false;
    }
    devices = n;
    return true;
  }();
  if (count) *count = devices;
  if (why_not) *why_not = reason;
  return present;
}

bool hip_query_pointer(const void* ptr, PointerInfo* info) {
  if (!ptr || !hip_device_present(nullptr, nullptr)) return false;
  unsigned memory_type = 0;
  int is_managed = 0;
  int ordinal = -1;
  hipDeviceptr_t range_start = nullptr;
  std::size_t range_size = 0;
  unsigned long long buffer_id = 0;
  hipPointer_attribute attributes[] = {HIP_POINTER_ATTRIBUTE_MEMORY_TYPE,    HIP_POINTER_ATTRIBUTE_IS_MANAGED,
                                       HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                       HIP_POINTER_ATTRIBUTE_RANGE_SIZE,     HIP_POINTER_ATTRIBUTE_BUFFER_ID};
  void* values[] = {&memory_type, &is_managed, &ordinal, &range_start, &range_size, &buffer_id};
  if (hipDrvPointerGetAttributes(6, attributes, values, const_cast<void*>(ptr)) != hipSuccess) {
    (void)hipGetLastError();  // host memory HIP never saw: not an error of the caller's
    return false;
  }
  if (memory_type != hipMemoryTypeDevice && !is_managed) return false;  // pinned host memory is host memory
  info->kind = is_managed ? MemoryKind::kManaged : MemoryKind::kDevice;
  info->owner = BackendKind::kHip;
  info->device = ordinal;
  info->base = reinterpret_cast<std::uintptr_t>(range_start);
  info->size = range_size;
  // Unique per allocation in the process; the range's start where the
  // runtime keeps no buffer id.
  info->allocation_id = buffer_id ? buffer_id : info->base;
  return true;
}

}  // namespace ferry::gpu
