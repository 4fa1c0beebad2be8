#include "engine/core/executor.h"

#include <cstring>
#include <vector>

#include "engine/core/reduce_common.h"
#include "engine/core/resources.h"

namespace ferry {
namespace {

// The emulated device's "kernel": the same arithmetic on the host views.
struct HostDirectReduce {
  const DirectReduceArgs& args;
  gpu::Backend* backend;

  template <typename T, ReduceOp Op>
  void run() {
    const void* const* table =
        args.table ? static_cast<const void* const*>(backend->host_view(args.table)) : nullptr;
    const auto pointer = [&](const void* const* listed, int i, int at) {
      return i < kInlineRanks ? listed[i] : table[at];
    };
    std::vector<const T*> in(args.ninputs);
    std::vector<T*> out(args.noutputs);
    for (int r = 0; r < args.ninputs; ++r)
      in[r] = static_cast<const T*>(backend->host_view(pointer(args.inputs, r, r)));
    for (int k = 0; k < args.noutputs; ++k)
      out[k] = static_cast<T*>(backend->host_view(
          pointer(const_cast<const void* const*>(args.outputs), k, args.ninputs + k)));
    for (std::size_t i = 0; i < args.count; ++i) {
      T acc = in[0][i];
      for (int r = 1; r < args.ninputs; ++r) acc = reduce<T, Op>(acc, in[r][i]);
      for (int k = 0; k < args.noutputs; ++k) out[k][i] = acc;
    }
  }
};

}  // namespace

Status run_direct_reduce_on_host(gpu::Backend* backend, const DirectReduceArgs& args) {
  HostDirectReduce visitor{args, backend};
  return dispatch_reduction(args.type, args.op, visitor) ? Status::kOk : Status::kUnsupported;
}

Status run_copies_on_host(gpu::Backend* backend, const CopyListArgs& args) {
  for (int k = 0; k < args.count; ++k)
    std::memmove(backend->host_view(args.destinations[k]), backend->host_view(args.sources[k]), args.bytes[k]);
  return Status::kOk;
}

Status list_direct_pointers(gpu::Backend* backend, DeviceResources& resources, int device, gpu::Stream stream,
                            const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                            DirectReduceArgs* args) {
  args->ninputs = static_cast<int>(inputs.size());
  args->noutputs = static_cast<int>(outputs.size());
  args->table = nullptr;
  args->table_aligned = false;
  for (int r = 0; r < args->ninputs && r < kInlineRanks; ++r) args->inputs[r] = inputs[r];
  for (int k = 0; k < args->noutputs && k < kInlineRanks; ++k) args->outputs[k] = outputs[k];
  if (args->ninputs <= kInlineRanks && args->noutputs <= kInlineRanks) return Status::kOk;
  std::vector<const void*> all(inputs);
  all.insert(all.end(), outputs.begin(), outputs.end());
  void* table = nullptr;
  const std::size_t bytes = all.size() * sizeof(void*);
  FERRY_CHECK(resources.table_for(backend, device, stream, bytes, &table));
  // CUDA is done with pageable memory when the call returns (staged, or
  // copied once the stream drained); emulated streams read it when they run,
  // so those wait.
  FERRY_CHECK(backend->copy_async(table, all.data(), bytes, stream));
  if (backend->execution_site() == gpu::ExecutionSite::kHost) FERRY_CHECK(backend->stream_synchronize(stream));
  args->table = static_cast<const void* const*>(table);
  args->table_aligned = true;
  for (const void* p : all) args->table_aligned = args->table_aligned && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
  return Status::kOk;
}

Status launch_direct_reduce(gpu::Backend* backend, const DirectReduceArgs& args, gpu::Stream stream) {
  const bool listed = args.table || (args.ninputs <= kInlineRanks && args.noutputs <= kInlineRanks);
  if (args.ninputs < 1 || args.noutputs < 1 || !listed) return Status::kInvalidArgument;
  if (args.count == 0) return Status::kOk;
  if (backend->execution_site() == gpu::ExecutionSite::kHost) {
    FERRY_CHECK(backend->stream_synchronize(stream));
    return run_direct_reduce_on_host(backend, args);
  }
#ifdef FERRY_HAVE_GPU_KERNELS
  return gpu_launch_direct_reduce(args, stream);
#else
  return Status::kUnsupported;
#endif
}

Status launch_copies(gpu::Backend* backend, const CopyListArgs& args, gpu::Stream stream) {
  if (args.count < 0 || args.count > kMaxListedCopies) return Status::kInvalidArgument;
  if (args.count == 0) return Status::kOk;
  if (backend->execution_site() == gpu::ExecutionSite::kHost) {
    FERRY_CHECK(backend->stream_synchronize(stream));
    return run_copies_on_host(backend, args);
  }
#ifdef FERRY_HAVE_GPU_KERNELS
  return gpu_launch_copies(args, stream);
#else
  return Status::kUnsupported;
#endif
}

Status CopyListLauncher::add(void* destination, const void* source, std::uint64_t bytes) {
  if (bytes == 0) return Status::kOk;
  list_.destinations[list_.count] = destination;
  list_.sources[list_.count] = source;
  list_.bytes[list_.count] = bytes;
  ++copies_;
  return ++list_.count < kMaxListedCopies ? Status::kOk : finish();
}

Status CopyListLauncher::finish() {
  const Status launched = launch_copies(backend_, list_, stream_);
  list_.count = 0;
  return launched;
}

}  // namespace ferry
