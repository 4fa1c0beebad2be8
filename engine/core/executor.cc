#include "engine/core/executor.h"

#include <cstring>

#include "engine/core/reduce_common.h"

namespace ferry {
namespace {

// The emulated device's "kernel": the same arithmetic on the host views.
struct HostDirectReduce {
  const DirectReduceArgs& args;
  gpu::Backend* backend;

  template <typename T, ReduceOp Op>
  void run() {
    const T* in[kMaxDirectRanks];
    T* out[kMaxDirectRanks];
    for (int r = 0; r < args.ninputs; ++r) in[r] = static_cast<const T*>(backend->host_view(args.inputs[r]));
    for (int k = 0; k < args.noutputs; ++k) out[k] = static_cast<T*>(backend->host_view(args.outputs[k]));
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

Status launch_direct_reduce(gpu::Backend* backend, const DirectReduceArgs& args, gpu::Stream stream) {
  if (args.ninputs < 1 || args.ninputs > kMaxDirectRanks || args.noutputs < 1 || args.noutputs > kMaxDirectRanks)
    return Status::kInvalidArgument;
  if (args.count == 0) return Status::kOk;
  if (backend->execution_site() == gpu::ExecutionSite::kHost) {
    FERRY_CHECK(backend->stream_synchronize(stream));
    return run_direct_reduce_on_host(backend, args);
  }
#ifdef FERRY_HAVE_CUDA
  return cuda_launch_direct_reduce(args, stream);
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
#ifdef FERRY_HAVE_CUDA
  return cuda_launch_copies(args, stream);
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
