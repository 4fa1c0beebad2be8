// One-shot and two-shot allreduce: SM loads straight from the peers' buffers.
#include "engine/collectives/algorithms/algorithms.h"

#include <vector>

#include "engine/core/executor.h"

namespace ferry::coll {

Status run_direct_reduce(Communicator& comm, const MappedBuffers& buffers, const Placement& where,
                         std::size_t count, DataType type, ReduceOp op, ElementRange slice, bool one_shot) {
  const int n = comm.size();
  const std::size_t element = data_type_size(type);
  DirectReduceArgs args{};
  args.count = slice.size();
  args.type = type;
  args.op = op;
  const std::size_t offset = slice.begin * element;
  std::vector<const void*> inputs(n);
  std::vector<void*> outputs;
  for (int r = 0; r < n; ++r) inputs[r] = at(buffers.inputs[r], offset);
  if (one_shot) {
    outputs.push_back(at(buffers.outputs[comm.rank()], offset));
  } else {
    for (int r = 0; r < n; ++r) outputs.push_back(at(buffers.outputs[r], offset));
  }
  FERRY_CHECK(where.backend->set_device(where.device));
  Worker* worker = worker_for_call(comm, where, count * element);
  // A table past kInlineRanks is written on the stream.
  gpu::Stream stream = nullptr;
  if (!worker || n > kInlineRanks) FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &stream));
  FERRY_CHECK(list_direct_pointers(comm, where, stream, inputs, outputs, &args));
  if (worker) {
    if (args.table) FERRY_CHECK(synchronize_stream(where.backend, stream));
    WorkItem item{};
    item.kind = WorkKind::kDirectReduce;
    item.reduce = args;
    return run_on_worker(*worker, count * element, item);
  }
  FERRY_CHECK(launch_direct_reduce(where.backend, args, stream));
  return synchronize_stream(where.backend, stream);
}

DirectReduceArgs reduce_of(std::size_t count, DataType type, ReduceOp op) {
  DirectReduceArgs args{};
  args.count = count;
  args.type = type;
  args.op = op;
  return args;
}

}  // namespace ferry::coll
