// MPI_Reduce_local's engine: one direct-reduce launch on this process's
// device, with no communicator.
#include "engine/collectives/collectives.h"
#include "engine/core/executor.h"

namespace ferry {

Status reduce_local(const void* in, void* inout, std::size_t count, DataType type, ReduceOp op) {
  if (!reduction_defined(type, op)) return Status::kUnsupported;
  const gpu::PointerInfo target = gpu::classify(inout);
  const gpu::PointerInfo source = gpu::classify(in);
  gpu::Backend* backend = gpu::owner_backend(target);
  int current = -1;
  if (target.kind != gpu::MemoryKind::kDevice || source.kind != gpu::MemoryKind::kDevice ||
      source.owner != target.owner || source.device != target.device || !backend ||
      !ok(backend->current_device(&current)) || current != target.device)
    return Status::kUnsupported;
  DirectReduceArgs args{};
  args.inputs[0] = in;
  args.inputs[1] = inout;
  args.outputs[0] = inout;
  args.ninputs = 2;
  args.noutputs = 1;
  args.count = count;
  args.type = type;
  args.op = op;
  // The null stream: CUDA's legacy default stream, after the application's
  // work there; the emulated device runs it now.
  FERRY_CHECK(launch_direct_reduce(backend, args, nullptr));
  return backend->stream_synchronize(nullptr);
}

}  // namespace ferry
