// What the HIP backend knows before it is made: whether an AMD GPU is
// usable, and pointer classification. Compiled only in HIP builds.
#pragma once

#include <string>

#include "engine/gpu/gpu.h"

namespace ferry::gpu {

// True when HIP finds a device (*count of them); otherwise *why_not says why.
// Asked once per process: without the amdgpu driver (/dev/kfd) the HIP
// runtime is never started; with it, the first call starts it.
bool hip_device_present(int* count, std::string* why_not);

// Runtime pointer query; false when ptr is not HIP device or managed memory
// (or no AMD GPU is present).
bool hip_query_pointer(const void* ptr, PointerInfo* info);

}  // namespace ferry::gpu
