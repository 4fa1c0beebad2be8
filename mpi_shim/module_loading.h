// CUDA's lazy module loading and kernels that wait on Ferry's proxy.
//
// A kernel that calls the device API on a rank of another machine waits
// (quiet, wait_until, barrier) on Ferry's proxy thread, whose copies go
// through the CUDA driver. With lazy loading (CUDA's default since 12.2) the
// first launch of any other kernel loads it under a driver lock held until
// the device is idle: the proxy's next copy waits for that lock, the
// waiting kernel for the proxy, and the job hangs. Eager loading has no
// such load.
#pragma once

namespace ferry::shim {

// Set before main by a constructor: whether Ferry asked CUDA for eager
// loading (CUDA_MODULE_LOADING=EAGER) because the program calls
// ferry_win_device_handle and had not chosen a mode itself.
bool asked_for_eager_loading();

// Called when a device handle reaches ranks of other machines: where the
// runtime still loads lazily, says once (rank 0, stderr, even without
// FERRY_DEBUG) that such kernels can hang and how to avoid it.
void warn_if_modules_load_lazily();

}  // namespace ferry::shim
