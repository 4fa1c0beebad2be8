// What CUDA must be told for kernels that wait on Ferry's proxy.
//
// A kernel that calls the device API on a rank of another machine waits
// (quiet, wait_until, barrier) on Ferry's proxy thread, whose copies go
// through the CUDA driver. With lazy loading (CUDA's default since 12.2) the
// first launch of any other kernel loads it under a driver lock held until
// the device is idle: the proxy's next copy waits for that lock, the
// waiting kernel for the proxy, and the job hangs. Eager loading has no
// such load.
//
// Work queues likewise: CUDA gives a process CUDA_DEVICE_MAX_CONNECTIONS of them
// (8 by default) and spreads its streams over them, so the proxy's stream
// may share one with a waiting kernel, and its copies then wait behind that
// kernel for good. The most there can be, 32, makes such sharing least
// likely.
#pragma once

namespace ferry::shim {

inline constexpr const char* kDeviceConnections = "32";

// Set before main by a constructor: whether Ferry asked CUDA for eager
// loading (CUDA_MODULE_LOADING=EAGER) because the program calls
// ferry_win_device_handle and had not chosen a mode itself.
bool asked_for_eager_loading();
// Likewise CUDA_DEVICE_MAX_CONNECTIONS=32, where the user had chosen none.
bool asked_for_device_connections();

// Called when a device handle reaches ranks of other machines: where the
// runtime still loads lazily, says once (rank 0, stderr, even without
// FERRY_DEBUG) that such kernels can hang and how to avoid it.
void warn_if_modules_load_lazily();
// Likewise where the program runs with another number of work queues than
// 32 (the user's choice, or CUDA's 8 where Ferry set none: Python).
void warn_if_few_device_connections();

}  // namespace ferry::shim
