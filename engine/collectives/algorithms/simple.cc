// Collectives over the Simple protocol's FIFOs: ring and tree allreduce,
// chain bcast.
#include "engine/collectives/algorithms/algorithms.h"

#include <mutex>
#include <set>
#include <utility>

#include "engine/collectives/simple_protocol.h"
#include "engine/core/peer_watch.h"

namespace ferry::coll {

bool simple_ready(Communicator& comm, const Placement& where) {
  Communicator::SimpleChannels* channels = nullptr;
  return ok(comm.simple_channels(where.backend, where.device, &channels));
}

Status run_simple(Communicator& comm, const Placement& where, SimpleCollective collective, int root,
                  const void* input, void* output, std::size_t count, DataType type, ReduceOp op) {
  gpu::Backend* backend = where.backend;
  FERRY_CHECK(backend->set_device(where.device));
  Communicator::SimpleChannels* channels = nullptr;
  FERRY_CHECK(comm.simple_channels(backend, where.device, &channels));
  const Status status = abandoned_or([&] {
    const SimplePlan* plan = nullptr;
    SimpleArgs args{};
    FERRY_CHECK(comm.simple_plan(collective, root, count, data_type_size(type), &plan, &args.steps));
    args.full_steps = plan->full_steps;
    args.last_steps = plan->last_steps;
    args.region_elements = plan->region_elements;
    args.regions = plan->regions;
    args.input = input;
    args.output = output;
    args.type = type;
    args.op = op;
    args.rank = comm.rank();
    args.nranks = comm.size();
    args.channels = channels->channels;
    args.group = kSimpleRegionsInFlight;
    args.timeout_ms = static_cast<std::uint32_t>(std::min<std::int64_t>(params().handshake_timeout, 1 << 20) * 1000);
    args.failed = channels->failed;
    args.abandon = abandon_word(backend);
    for (int r = 0; r < comm.size() && r < kInlineRanks; ++r) args.peers[r] = channels->peers[r];
    args.peer_table = static_cast<const SimplePeer*>(channels->peer_table);
    gpu::Stream stream = nullptr;
    FERRY_CHECK(comm.resources().stream_for(backend, where.device, &stream));
    if (comm.size() == 1 && input != output)
      FERRY_CHECK(backend->copy_async(output, input, count * data_type_size(type), stream));
    FERRY_CHECK(launch_simple(backend, args, stream));
    FERRY_CHECK(synchronize_stream(backend, stream));
    const std::int32_t failed = *channels->failed;
    *channels->failed = 0;
    return failed ? static_cast<Status>(failed) : Status::kOk;
  }());
  if (!ok(status)) {
    static const char* const names[] = {"ring allreduce", "tree allreduce", "chain bcast"};
    FERRY_WARN(Coll, "%s failed (%s); this communicator's Simple protocol FIFOs are not used again",
               names[static_cast<int>(collective)], status_name(status));
    channels->broken = true;
  }
  return status;
}

}  // namespace ferry::coll
