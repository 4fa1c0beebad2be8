// Copy-engine push allreduce (cepush), blocking and nonblocking.
#include "engine/collectives/algorithms/algorithms.h"

#include <mutex>
#include <vector>

#include "engine/core/executor.h"
#include "engine/collectives/tuner.h"

namespace ferry::coll {
namespace {

// Copy-engine push (cepush). Chunk by chunk, the push stream copies this
// rank's input into its landing slot in every peer and raises that peer's
// arrived flag; the reduce stream waits for every peer's flag, reduces the
// chunk from the input and the slots in rank order (every rank gets the same
// bits) and raises each sender's consumed flag, which the sender waits for
// before it refills that slot two chunks later. Flags carry a sequence
// number that runs on from call to call, so a call needs no set-up; nothing
// of the application's is mapped and no rank reads another's buffers, so no
// closing exchange. A call that fails, or is unfinished after
// FERRY_HANDSHAKE_TIMEOUT, raises its own flags to free its streams, and the
// slots are not used again.
//
// Streams 0-2 and events 0-3 are the copy-engine two-shot's. The reduce
// stream is urgent: its kernels run as soon as the chunk has landed, not
// after every block of an application kernel queued meanwhile.
constexpr int kPushStream = 3, kReduceStream = 4, kPushedEvent = 4;

// Queues one call's chunks on the push and reduce streams (the caller holds
// the communicator's copy-push lock, so calls queue whole and in order).
Status queue_copy_push(Communicator& comm, const Placement& where, const void* input, void* output,
                       std::size_t count, DataType type, ReduceOp op) {
  gpu::Backend* backend = where.backend;
  FERRY_CHECK(backend->set_device(where.device));
  Communicator::CopyPushSlots* slots = nullptr;
  FERRY_CHECK(comm.copy_push_slots(backend, where.device, &slots));
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t element = data_type_size(type);
  gpu::Stream push = nullptr, reduce = nullptr;
  gpu::Event pushed[2];
  FERRY_CHECK(comm.resources().stream_for(backend, where.device, &push, kPushStream));
  FERRY_CHECK(comm.resources().stream_for(backend, where.device, &reduce, kReduceStream, true));
  for (int k = 0; k < 2; ++k) FERRY_CHECK(comm.resources().event_for(backend, where.device, &pushed[k], kPushedEvent + k));
  void* own = slots->buffers[me];

  std::vector<const void*> inputs(n);
  std::size_t begin = 0;
  for (const std::size_t elements : copy_push_chunks(count, element, slots->slot_bytes)) {
    const std::uint32_t sequence = ++slots->sequence;
    const int k = static_cast<int>(sequence % 2);
    const std::size_t offset = begin * element;
    DirectReduceArgs args = reduce_of(elements, type, op);
    inputs[me] = at(input, offset);
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      // The slot last held chunk sequence - 2: r must have reduced it.
      FERRY_CHECK(backend->stream_wait_value(push, comm.copy_push_consumed(own, r), sequence - 2));
      FERRY_CHECK(backend->copy_async(comm.copy_push_slot(r, me, k), at(input, offset), elements * element, push));
      FERRY_CHECK(backend->stream_write_value(push, comm.copy_push_arrived(slots->buffers[r], me), sequence));
      inputs[r] = comm.copy_push_slot(me, r, k);
    }
    FERRY_CHECK(backend->event_record(pushed[k], push));
    for (int r = 0; r < n; ++r)
      if (r != me) FERRY_CHECK(backend->stream_wait_value(reduce, comm.copy_push_arrived(own, r), sequence));
    // In place, the reduce overwrites what the push reads.
    FERRY_CHECK(backend->stream_wait_event(reduce, pushed[k]));
    FERRY_CHECK(list_direct_pointers(comm, where, reduce, inputs, {at(output, offset)}, &args));
    FERRY_CHECK(launch_direct_reduce(backend, args, reduce));
    for (int r = 0; r < n; ++r)
      if (r != me)
        FERRY_CHECK(backend->stream_write_value(reduce, comm.copy_push_consumed(slots->buffers[r], me), sequence));
    begin += elements;
  }
  return Status::kOk;
}

// After a failed or unfinished cepush call: raises this rank's flags far
// enough ahead that every wait queued so far is satisfied, lets the streams
// drain, and retires the slots.
void abandon_copy_push(Communicator& comm, gpu::Backend* backend, int device, Status why) {
  Communicator::CopyPushSlots* slots = nullptr;
  // (Only where they are made: making them is collective.)
  if (!comm.copy_push_made(backend, device) || !ok(comm.copy_push_slots(backend, device, &slots))) return;
  const std::uint32_t release = slots->sequence + (1u << 30);
  void* own = slots->buffers[comm.rank()];
  for (int r = 0; r < comm.size(); ++r) {
    if (r == comm.rank()) continue;
    FERRY_LOG_IF_FAILED(backend->write_value_now(comm.copy_push_arrived(own, r), release));
    FERRY_LOG_IF_FAILED(backend->write_value_now(comm.copy_push_consumed(own, r), release));
  }
  for (const int index : {kPushStream, kReduceStream}) {
    gpu::Stream stream = nullptr;
    if (ok(comm.resources().stream_for(backend, device, &stream, index))) FERRY_LOG_IF_FAILED(backend->stream_synchronize(stream));
  }
  FERRY_WARN(Coll, "copy-engine push allreduce failed (%s); this communicator's landing slots are not used again",
             status_name(why));
  slots->broken = true;
}

}  // namespace

Status run_copy_push(Communicator& comm, const Placement& where, const void* input, void* output,
                     std::size_t count, DataType type, ReduceOp op) {
  const auto deadline = handshake_deadline();
  Status queued;
  {
    std::lock_guard<std::mutex> lock(comm.copy_push_mutex());
    queued = queue_copy_push(comm, where, input, output, count, type, op);
  }
  gpu::Stream push = nullptr, reduce = nullptr;
  FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &push, kPushStream));
  FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &reduce, kReduceStream, true));
  const Status status = ok(queued) ? wait_streams_until(where.backend, {push, reduce}, deadline) : queued;
  if (!ok(status)) {
    std::lock_guard<std::mutex> lock(comm.copy_push_mutex());
    abandon_copy_push(comm, where.backend, where.device, status);
  }
  return status;
}

}  // namespace ferry::coll

namespace ferry {

using namespace coll;  // the copy-push helpers above

Status prepare_nonblocking_allreduce(Communicator& comm, gpu::Backend* backend, int device, bool* ready) {
  *ready = false;
  const std::int32_t here =
      backend && reach_of(comm).mapped && comm.copy_push_possible(backend, device);
  std::vector<std::int32_t> everyone(comm.size());
  FERRY_CHECK(comm.bootstrap().allgather(&here, everyone.data(), sizeof(here)));
  for (const std::int32_t h : everyone)
    if (!h) return Status::kOk;
  Communicator::CopyPushSlots* slots = nullptr;
  *ready = ok(comm.copy_push_slots(backend, device, &slots));
  return Status::kOk;
}

bool nonblocking_allreduce_possible(Communicator& comm, const void* send, const void* recv, std::size_t count,
                                    DataType type, ReduceOp op) {
  if (count == 0 || !reduction_defined(type, op)) return false;
  const Placement where = placement_of(recv);
  const Placement in = placement_of(send ? send : recv);
  return where.backend && in.backend == where.backend && in.device == where.device &&
         comm.copy_push_possible(where.backend, where.device) && comm.copy_push_made(where.backend, where.device);
}

Status queue_nonblocking_allreduce(Communicator& comm, const void* send, void* recv, std::size_t count,
                                   DataType type, ReduceOp op, gpu::Event done) {
  const Placement where = placement_of(recv);
  std::lock_guard<std::mutex> lock(comm.copy_push_mutex());
  FERRY_CHECK(queue_copy_push(comm, where, send ? send : recv, recv, count, type, op));
  gpu::Stream reduce = nullptr;
  FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &reduce, kReduceStream, true));
  // The reduce stream waits for the push stream's last chunk: its end is the call's.
  FERRY_CHECK(where.backend->event_record(done, reduce));
  count_allreduce_run(AllreduceAlgorithm::kCopyPush);
  return Status::kOk;
}

void abandon_nonblocking_allreduces(Communicator& comm, const void* recv, Status why) {
  const Placement where = placement_of(recv);
  if (!where.backend) return;
  std::lock_guard<std::mutex> lock(comm.copy_push_mutex());
  abandon_copy_push(comm, where.backend, where.device, why);
}

}  // namespace ferry
