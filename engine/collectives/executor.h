// Executors carry out one step of a schedule on a device backend: GPU
// kernels (kernels.cu) or host code on the emulated device.
#pragma once

#include <cstddef>

#include "engine/common/types.h"
#include "engine/gpu/gpu.h"

namespace ferry {

constexpr int kMaxDirectRanks = 16;

// out[k][i] = in[0][i] op ... op in[n-1][i] for every output k, i < count.
// Pointers are already mapped into this process.
struct DirectReduceArgs {
  const void* inputs[kMaxDirectRanks];
  void* outputs[kMaxDirectRanks];
  int ninputs;
  int noutputs;
  std::size_t count;
  DataType type;
  ReduceOp op;
};

Status launch_direct_reduce(gpu::Backend* backend, const DirectReduceArgs& args, gpu::Stream stream);

// The emulated device's direct reduce, run now on the calling thread.
Status run_direct_reduce_on_host(gpu::Backend* backend, const DirectReduceArgs& args);

#ifdef FERRY_HAVE_CUDA
Status cuda_launch_direct_reduce(const DirectReduceArgs& args, gpu::Stream stream);
#endif

}  // namespace ferry
