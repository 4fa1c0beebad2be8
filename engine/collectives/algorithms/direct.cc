// One-shot and two-shot allreduce: SM loads straight from the peers' buffers.
#include "engine/collectives/algorithms/algorithms.h"

#include "engine/core/executor.h"

namespace ferry::coll {

Status run_direct_reduce(Communicator& comm, const MappedBuffers& buffers, const Placement& where,
                         std::size_t count, DataType type, ReduceOp op, ElementRange slice, bool one_shot) {
  const int n = comm.size();
  const std::size_t element = data_type_size(type);
  DirectReduceArgs args{};
  args.ninputs = n;
  args.noutputs = one_shot ? 1 : n;
  args.count = slice.size();
  args.type = type;
  args.op = op;
  const std::size_t offset = slice.begin * element;
  for (int r = 0; r < n; ++r) args.inputs[r] = at(buffers.inputs[r], offset);
  if (one_shot) {
    args.outputs[0] = at(buffers.outputs[comm.rank()], offset);
  } else {
    for (int r = 0; r < n; ++r) args.outputs[r] = at(buffers.outputs[r], offset);
  }
  FERRY_CHECK(where.backend->set_device(where.device));
  if (Worker* worker = worker_for_call(comm, where, count * element)) {
    WorkItem item{};
    item.kind = WorkKind::kDirectReduce;
    item.reduce = args;
    return run_on_worker(*worker, count * element, item);
  }
  gpu::Stream stream = nullptr;
  FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &stream));
  FERRY_CHECK(launch_direct_reduce(where.backend, args, stream));
  return where.backend->stream_synchronize(stream);
}

DirectReduceArgs reduce_into_one(int ninputs, std::size_t count, DataType type, ReduceOp op, void* output) {
  DirectReduceArgs args{};
  args.ninputs = ninputs;
  args.noutputs = 1;
  args.count = count;
  args.type = type;
  args.op = op;
  args.outputs[0] = output;
  return args;
}

}  // namespace ferry::coll
