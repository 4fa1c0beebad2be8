// Looks at the CUDA driver only if the process already loaded it.
#pragma once

#include "engine/gpu/gpu.h"

namespace ferry::gpu {

// True once libcuda is in the process. Cheap when it is not: looks again
// only after the dynamic loader added objects (LoaderWatch), at most once a
// millisecond.
bool cuda_driver_loaded();

// Driver-level pointer query; false when ptr is not CUDA-managed memory.
bool cuda_query_pointer(const void* ptr, PointerInfo* info);

// Whether the calling thread has a current CUDA context.
bool cuda_thread_has_context();

// Makes synchronous copies into the allocation at ptr complete before they
// return (CU_POINTER_ATTRIBUTE_SYNC_MEMOPS): a cudaMemcpy from pageable host
// memory otherwise returns before its data lands, and a peer process reading
// the buffer straight after would see old bytes.
bool cuda_set_sync_memops(const void* ptr);

}  // namespace ferry::gpu
