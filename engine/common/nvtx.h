// NVTX ranges for profilers (Nsight Systems, `nsys profile mpirun ...`):
// emitted only where a tool is attached (NVTX_INJECTION64_PATH set when
// the library loaded) and the build has the CUDA toolkit's header-only
// NVTX 3; otherwise every call here is a flag test and nothing more.
#pragma once

#include <cstdint>

namespace ferry {

extern const bool g_nvtx_attached;
inline bool nvtx_attached() { return g_nvtx_attached; }

// A range on this thread's stack (push and pop in order).
void nvtx_push(const char* name);
void nvtx_pop();
// A range that may end anywhere; 0: none started.
std::uint64_t nvtx_start(const char* name);
void nvtx_end(std::uint64_t id);

}  // namespace ferry
