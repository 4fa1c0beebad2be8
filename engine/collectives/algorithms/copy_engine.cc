// The copy-engine two-shot allreduce: copy engines move the data, a kernel reduces.
#include "engine/collectives/algorithms/algorithms.h"

#include <algorithm>
#include <vector>

#include "engine/core/executor.h"

namespace ferry::coll {

Status run_copy_engine_reduce(Communicator& comm, const MappedBuffers& buffers, const Placement& where,
                              std::size_t count, DataType type, ReduceOp op) {
  constexpr std::size_t kMaxChunkBytes = std::size_t{16} << 20;
  constexpr int kSlots = 2;
  enum { kPull, kReduce, kPush, kStreams };
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t element = data_type_size(type);
  const ElementRange slice = direct_part(me, n, count, type);
  if (slice.size() == 0) return Status::kOk;
  const std::size_t chunk = pipeline_chunk_elements(slice.size(), element, kMaxChunkBytes);
  const std::size_t chunk_bytes = chunk * element;

  gpu::Backend* backend = where.backend;
  FERRY_CHECK(backend->set_device(where.device));
  gpu::Stream streams[kStreams];
  gpu::Event pulled[kSlots], reduced[kSlots];
  for (int i = 0; i < kStreams; ++i) FERRY_CHECK(comm.resources().stream_for(backend, where.device, &streams[i], i));
  for (int i = 0; i < kSlots; ++i) {
    FERRY_CHECK(comm.resources().event_for(backend, where.device, &pulled[i], 2 * i));
    FERRY_CHECK(comm.resources().event_for(backend, where.device, &reduced[i], 2 * i + 1));
  }
  void* scratch = nullptr;
  FERRY_CHECK(comm.resources().scratch_for(backend, where.device, kSlots * (n - 1) * chunk_bytes, &scratch));

  std::vector<const void*> inputs(n);
  std::size_t c = 0;
  for (std::size_t begin = slice.begin; begin < slice.end; begin += chunk, ++c) {
    const std::size_t elements = std::min(chunk, slice.end - begin);
    const std::size_t offset = begin * element;
    const std::size_t bytes = elements * element;
    const int slot = static_cast<int>(c % kSlots);
    void* slot_base = at(scratch, slot * (n - 1) * chunk_bytes);

    // The slot is free once the reduce of chunk c - kSlots has read it.
    if (c >= kSlots) FERRY_CHECK(backend->stream_wait_event(streams[kPull], reduced[slot]));
    DirectReduceArgs args = reduce_of(elements, type, op);
    inputs[0] = at(buffers.inputs[me], offset);
    for (int step = 1; step < n; ++step) {
      const int peer = (me + step) % n;
      void* landing = at(slot_base, (step - 1) * chunk_bytes);
      FERRY_CHECK(backend->copy_async(landing, at(buffers.inputs[peer], offset), bytes, streams[kPull]));
      inputs[step] = landing;
    }
    FERRY_CHECK(backend->event_record(pulled[slot], streams[kPull]));

    FERRY_CHECK(backend->stream_wait_event(streams[kReduce], pulled[slot]));
    FERRY_CHECK(list_direct_pointers(comm, where, streams[kReduce], inputs, {at(buffers.outputs[me], offset)}, &args));
    FERRY_CHECK(launch_direct_reduce(backend, args, streams[kReduce]));
    FERRY_CHECK(backend->event_record(reduced[slot], streams[kReduce]));

    FERRY_CHECK(backend->stream_wait_event(streams[kPush], reduced[slot]));
    for (int step = 1; step < n; ++step) {
      const int peer = (me + step) % n;
      FERRY_CHECK(backend->copy_async(at(buffers.outputs[peer], offset), at(buffers.outputs[me], offset), bytes,
                                      streams[kPush]));
    }
  }
  for (gpu::Stream stream : streams) FERRY_CHECK(synchronize_stream(backend, stream));
  return Status::kOk;
}

}  // namespace ferry::coll
