// Executors carry out one step of a schedule on a device backend: GPU
// kernels (executor_kernels.cu) or host code on the emulated device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/common/types.h"
#include "engine/gpu/gpu.h"

namespace ferry {

class DeviceResources;

// Per-rank pointers that kernel arguments and worker items carry inline;
// past this many, they also point to a table in device memory.
constexpr int kInlineRanks = 16;

// out[k][i] = in[0][i] op ... op in[n-1][i] for every output k, i < count.
// Pointers are already mapped into this process. The first kInlineRanks
// inputs and outputs are inline; with more of either, table holds all of
// them (inputs, then outputs) and entries past kInlineRanks are read there.
struct DirectReduceArgs {
  const void* inputs[kInlineRanks];
  void* outputs[kInlineRanks];
  const void* const* table;  // device memory; nullptr up to kInlineRanks
  bool table_aligned;        // every pointer in table is 16-byte aligned
  int ninputs;
  int noutputs;
  std::size_t count;
  DataType type;
  ReduceOp op;
};

// Fills args' pointers, any number of them: inline, and past kInlineRanks
// also into a table of resources' for stream (DeviceResources::table_for),
// copied there on stream, so only work queued on stream after it reads it.
Status list_direct_pointers(gpu::Backend* backend, DeviceResources& resources, int device, gpu::Stream stream,
                            const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                            DirectReduceArgs* args);

Status launch_direct_reduce(gpu::Backend* backend, const DirectReduceArgs& args, gpu::Stream stream);

// A list's length, not a limit on ranks: CopyListLauncher launches longer
// lists in parts.
constexpr int kMaxListedCopies = 16;

// Up to kMaxListedCopies independent copies (a bcast's pull, an alltoallv's
// blocks), by SMs in one kernel. Pointers are already mapped into this process.
struct CopyListArgs {
  const void* sources[kMaxListedCopies];
  void* destinations[kMaxListedCopies];
  std::uint64_t bytes[kMaxListedCopies];
  std::int32_t count;
  std::int32_t reserved;
};

Status launch_copies(gpu::Backend* backend, const CopyListArgs& args, gpu::Stream stream);

// Copies gathered into lists, each launched on stream (launch_copies) as
// it fills; finish() launches the rest.
class CopyListLauncher {
 public:
  CopyListLauncher(gpu::Backend* backend, gpu::Stream stream) : backend_(backend), stream_(stream) {}
  // An empty copy adds nothing.
  Status add(void* destination, const void* source, std::uint64_t bytes);
  Status finish();
  int copies() const { return copies_; }  // added so far

 private:
  gpu::Backend* backend_;
  gpu::Stream stream_;
  CopyListArgs list_{};
  int copies_ = 0;
};

// The emulated device's direct reduce and copy list, run now on the
// calling thread.
Status run_direct_reduce_on_host(gpu::Backend* backend, const DirectReduceArgs& args);
Status run_copies_on_host(gpu::Backend* backend, const CopyListArgs& args);

#ifdef FERRY_HAVE_GPU_KERNELS
Status gpu_launch_direct_reduce(const DirectReduceArgs& args, gpu::Stream stream);
Status gpu_launch_copies(const CopyListArgs& args, gpu::Stream stream);
#endif

}  // namespace ferry
