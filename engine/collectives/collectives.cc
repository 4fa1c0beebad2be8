#include "engine/collectives/collectives.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "engine/collectives/agreement.h"
#include "engine/collectives/algorithms/algorithms.h"
#include "engine/collectives/call.h"
#include "engine/collectives/hierarchy.h"
#include "engine/core/executor.h"
#include "engine/core/peer_watch.h"
#include "engine/collectives/schedule.h"
#include "engine/collectives/simple_protocol.h"
#include "engine/collectives/tuner.h"
#include "engine/collectives/worker.h"
#include "engine/collectives/worker_common.h"
#include "engine/common/params.h"

namespace ferry {

using namespace coll;  // call.h, algorithms/algorithms.h

namespace {

// The handshake's algorithm field for bcast and alltoallv: the LL protocol
// (every rank able to), the chain over the Simple protocol (bcast), or the
// copy paths.
constexpr std::uint16_t kCopyPaths = 0, kLlPath = 1, kChainPath = 2;

// Bcast along a chain from three ranks and 1 MiB on: every pull of the
// root's buffer shares the root's links, (n-1) times its bytes, while a
// chain moves them over each link once. Two ranks pull (one reader).
constexpr int kChainMinRanks = 3;
constexpr std::size_t kChainMinBytes = std::size_t{1} << 20;

// Bcast's default LL range, the pull beyond: as measured on 2x H200, and,
// with every rank on one GPU (MPS), up to 256 KiB, where LL beat the pull
// on one H200, two ranks, and at 512 KiB did not (bench/RESULTS.md).
constexpr std::size_t kLlBcastMaxBytes = 16 << 10;
constexpr std::size_t kLlBcastOneGpuMaxBytes = 256 << 10;

// Ring and tree run over the Simple protocol's FIFOs.
bool uses_fifos(AllreduceAlgorithm algorithm) {
  return algorithm == AllreduceAlgorithm::kRing || algorithm == AllreduceAlgorithm::kTree;
}

// The worker's one-shot allreduces, over LL or LL128.
bool on_worker(AllreduceAlgorithm algorithm) {
  return algorithm == AllreduceAlgorithm::kOneShotLl || algorithm == AllreduceAlgorithm::kOneShotLl128;
}

// Whether peers map this rank's buffers (LL, LL128, ring, tree and cepush
// never do).
bool maps_buffers(AllreduceAlgorithm algorithm) {
  return !on_worker(algorithm) && algorithm != AllreduceAlgorithm::kCopyPush && !uses_fifos(algorithm);
}

// Makes the landing slots at the first cepush call (collective); false on
// every rank when they cannot be made.
bool copy_push_ready(Communicator& comm, const Placement& where) {
  Communicator::CopyPushSlots* slots = nullptr;
  return ok(comm.copy_push_slots(where.backend, where.device, &slots));
}

Status run_allreduce(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                     const void* input, void* output, std::size_t count, DataType type, ReduceOp op) {
  // The ranks' choices differ only when FERRY_TUNE forced an algorithm that
  // cannot run in place on some of them: choose again, knowing that.
  bool any_in_place = false, agreed = true;
  for (const Handshake& h : all) {
    any_in_place = any_in_place || h.in_place;
    agreed = agreed && h.algorithm == all[0].algorithm;
  }
  AllreduceAlgorithm algorithm =
      agreed ? static_cast<AllreduceAlgorithm>(all[0].algorithm)
             : choose_allreduce(comm.size(), count * data_type_size(type), any_in_place);
  // LL, ring and tree need every rank to have skipped its exports: here
  // they did not.
  if (!maps_buffers(algorithm))
    algorithm = any_in_place ? AllreduceAlgorithm::kTwoShot : AllreduceAlgorithm::kOneShot;
  count_allreduce_run(algorithm);
  if (comm.by_gpu_leaders()) return run_allreduce_by_gpu_leaders(comm, all, where, input, output, count, type, op);
  MappedBuffers buffers{};
  FERRY_CHECK(map_all(comm, all, input, output, algorithm != AllreduceAlgorithm::kOneShot, &buffers));
  switch (algorithm) {
    case AllreduceAlgorithm::kOneShot:
      return run_direct_reduce(comm, buffers, where, count, type, op, {0, count}, /*one_shot=*/true);
    case AllreduceAlgorithm::kTwoShot:
      return run_direct_reduce(comm, buffers, where, count, type, op,
                               direct_part(comm.rank(), comm.size(), count, type), /*one_shot=*/false);
    case AllreduceAlgorithm::kCopyEngine:
      return run_copy_engine_reduce(comm, buffers, where, count, type, op);
    case AllreduceAlgorithm::kOneShotLl:  // taken above, as are LL128, ring, tree and cepush
    case AllreduceAlgorithm::kOneShotLl128:
    case AllreduceAlgorithm::kRing:
    case AllreduceAlgorithm::kTree:
    case AllreduceAlgorithm::kCopyPush:
    case AllreduceAlgorithm::kCount:
      break;
  }
  return Status::kInternal;
}

}  // namespace

Status allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                 bool eligible, bool* ran) {
  if (comm.hierarchy()) return hierarchical_allreduce(comm, *comm.hierarchy(), send, recv, count, type, op, eligible, ran);
  *ran = false;
  PhaseClock clock(EngineCollective::kAllreduce);
  const PeerReach reach = reach_of(comm);
  const void* input = send ? send : recv;
  Placement where;
  SimpleGate gate;
  Handshake mine{CollectiveKind::kAllreduce, 0, 0, send == nullptr, {}, {}, reduction_signature(count, type, op)};
  // One rank in place: its input is the result.
  if (comm.size() == 1 && send == nullptr && eligible && count > 0 && reduction_defined(type, op) &&
      placement_of(recv).backend) {
    *ran = true;
    clock.count_call();
    return Status::kOk;
  }
  if (eligible && count > 0 && reach.any && reduction_defined(type, op)) {
    where = placement_of(recv);
    const Placement in = placement_of(input);
    AllreduceAlgorithm planned = AllreduceAlgorithm::kOneShot;
    if (reach.mapped) {
      planned = choose_allreduce(comm.size(), count * data_type_size(type), send == nullptr);
      // LL128 reduces a few (type, op) pairs (worker_common.h); LL any.
      if (planned == AllreduceAlgorithm::kOneShotLl128 && !ll128_reduces(type, op))
        planned = count * data_type_size(type) <= ll_call_max_bytes(comm.size()) ? AllreduceAlgorithm::kOneShotLl
                  : send == nullptr                                          ? AllreduceAlgorithm::kTwoShot
                                                                             : AllreduceAlgorithm::kOneShot;
      // LL needs the worker, ring and tree their FIFOs; without them here,
      // one-shot (or two-shot in place).
      const bool possible =
          where.backend &&
          (on_worker(planned)                         ? comm.ll_possible(where.backend, where.device)
           : planned == AllreduceAlgorithm::kCopyPush ? comm.copy_push_possible(where.backend, where.device)
           : uses_fifos(planned)                      ? comm.simple_possible(where.backend, where.device) &&
                                                           gate.try_enter(where.backend, where.device)
                                                      : true);
      if (!possible) planned = send == nullptr ? AllreduceAlgorithm::kTwoShot : AllreduceAlgorithm::kOneShot;
    }
    mine.algorithm = static_cast<std::uint16_t>(planned);
    mine.eligible = where.backend && in.backend == where.backend && in.device == where.device &&
                    (!reach.mapped || !maps_buffers(planned) ||
                     (ok(comm.peer_memory().export_buffer(input, in.info, &mine.first)) &&
                      ok(comm.peer_memory().export_buffer(recv, where.info, &mine.second))));
  }
  std::vector<Handshake> all;
  bool everyone = false;
  FERRY_CHECK(agree(comm, mine, &all, &everyone, clock));
  // Ranks on LL, ring or tree exported nothing: unless every rank takes the
  // same one of those, all stage.
  bool unanimous = true, any_unmapped = false;
  for (const Handshake& h : all) {
    unanimous = unanimous && h.algorithm == all[0].algorithm;
    any_unmapped = any_unmapped || !maps_buffers(static_cast<AllreduceAlgorithm>(h.algorithm));
  }
  if (!everyone || (any_unmapped && !unanimous)) return Status::kOk;
  const auto agreed = static_cast<AllreduceAlgorithm>(all[0].algorithm);
  if (uses_fifos(agreed) && !simple_ready(comm, where)) return Status::kOk;  // every rank stages
  if (agreed == AllreduceAlgorithm::kCopyPush && !copy_push_ready(comm, where)) return Status::kOk;
  *ran = true;
  clock.carries(reach.carrier(), count * data_type_size(type));
  if (any_unmapped && reach.mapped) {
    count_allreduce_run(agreed);
    if (on_worker(agreed)) {
      const WorkKind kind =
          agreed == AllreduceAlgorithm::kOneShotLl ? WorkKind::kLlAllreduce : WorkKind::kLl128Allreduce;
      return finish_alone(run_ll_allreduce(comm, where, kind, input, recv, count, type, op), clock);
    }
    if (agreed == AllreduceAlgorithm::kCopyPush)
      return finish_alone(run_copy_push(comm, where, input, recv, count, type, op), clock);
    const SimpleCollective collective =
        agreed == AllreduceAlgorithm::kRing ? SimpleCollective::kRingAllreduce : SimpleCollective::kTreeAllreduce;
    return finish_alone(run_simple(comm, where, collective, 0, input, recv, count, type, op), clock);
  }
  if (reach.shm)
    return finish_together(comm, run_shm_allreduce(comm, where, input, recv, count, type, op), clock);
  return finish_together(comm, run_allreduce(comm, all, where, input, recv, count, type, op), clock);
}

Status bcast(Communicator& comm, void* buffer, std::size_t bytes, int root, bool eligible, bool* ran) {
  if (comm.hierarchy()) return hierarchical_bcast(comm, *comm.hierarchy(), buffer, bytes, root, eligible, ran);
  *ran = false;
  PhaseClock clock(EngineCollective::kBcast);
  const PeerReach reach = reach_of(comm);
  Placement where;
  SimpleGate gate;
  Handshake mine{CollectiveKind::kBcast, 0, 0, 0, {}, {}, rooted_signature(bytes, root)};
  // One rank holds the root's bytes already: nothing to run (it took an LL
  // call on the worker before; bench/RESULTS.md).
  if (comm.size() == 1 && eligible && bytes > 0 && root == 0 && placement_of(buffer).backend) {
    *ran = true;
    clock.count_call();
    return Status::kOk;
  }
  if (eligible && bytes > 0 && reach.any && root >= 0 && root < comm.size()) {
    where = placement_of(buffer);
    // FERRY_TUNE's algorithm where it can run, else the engine's choice:
    // above 16 KiB the copy engine's pull measured faster than LL on every
    // worker block (2x H200, bench/RESULTS.md; LL on blocks by size,
    // worker.h, is not yet measured over NVLink), but not with
    // every rank on one GPU (kLlBcastOneGpuMaxBytes).
    // Asked only where LL is wanted: the check starts the engine worker.
    auto ll_possible = [&] { return ll_ready(comm, reach, where, bytes); };
    const bool chain_possible = reach.mapped && comm.size() >= kChainMinRanks &&
                                where.backend && comm.simple_possible(where.backend, where.device);
    BcastAlgorithm planned = tuned_bcast(bytes);
    if ((planned == BcastAlgorithm::kLl && !ll_possible()) || (planned == BcastAlgorithm::kChain && !chain_possible))
      planned = BcastAlgorithm::kCount;
    if (planned == BcastAlgorithm::kCount) {
      const bool one_gpu = comm.on_one_gpu();
      const std::size_t ll_max_bytes = one_gpu ? kLlBcastOneGpuMaxBytes : kLlBcastMaxBytes;
      planned = bytes <= ll_max_bytes && ll_possible()            ? BcastAlgorithm::kLl
                : bytes >= kChainMinBytes && chain_possible       ? BcastAlgorithm::kChain
                                                                  : BcastAlgorithm::kPull;
    }
    if (planned == BcastAlgorithm::kChain && !gate.try_enter(where.backend, where.device))
      planned = BcastAlgorithm::kPull;
    mine.algorithm = planned == BcastAlgorithm::kLl      ? kLlPath
                     : planned == BcastAlgorithm::kChain ? kChainPath
                                                         : kCopyPaths;
    // The root's buffer is pulled; where GPU leaders copy for the others,
    // every rank's is written by one.
    mine.eligible = where.backend != nullptr &&
                    (!reach.mapped || (comm.rank() != root && !comm.by_gpu_leaders()) ||
                     ok(comm.peer_memory().export_buffer(buffer, where.info, &mine.first)));
  }
  std::vector<Handshake> all;
  bool everyone = false;
  FERRY_CHECK(agree(comm, mine, &all, &everyone, clock));
  if (!everyone) return Status::kOk;
  *ran = true;
  clock.carries(reach.carrier(), bytes);
  if (reach.shm)
    return finish_together(comm, run_shm_bcast(comm, where, buffer, bytes, root), clock);
  if (all_chose(all, kLlPath)) {
    count_bcast_run(BcastAlgorithm::kLl);
    return finish_alone(run_ll_bcast(comm, where, buffer, bytes, root), clock);
  }
  // Without the channels (ranks sharing a GPU), the pulls below.
  if (all_chose(all, kChainPath) && simple_ready(comm, where)) {
    count_bcast_run(BcastAlgorithm::kChain);
    return finish_alone(run_simple(comm, where, SimpleCollective::kChainBcast, root, buffer, buffer, bytes,
                                   DataType::kUint8, ReduceOp::kSum),
                        clock);
  }

  // Every non-root rank pulls the root's buffer with its copy engine (or
  // its GPU's leader pulls for it).
  count_bcast_run(BcastAlgorithm::kPull);
  if (comm.by_gpu_leaders())
    return finish_together(comm, run_bcast_by_gpu_leaders(comm, all, where, buffer, bytes, root), clock);
  Status local = Status::kOk;
  if (comm.rank() != root) {
    local = [&] {
      void* source = nullptr;
      gpu::Stream stream = nullptr;
      FERRY_CHECK(comm.peer_memory().import_buffer(all[root].first, &source));
      FERRY_CHECK(where.backend->set_device(where.device));
      // Above ~4 KiB one worker block pulls more slowly than a copy engine
      // (measured on 2x H200: bench/RESULTS.md).
      constexpr std::size_t kBcastWorkerBytes = 4 << 10;
      Worker* worker = bytes <= kBcastWorkerBytes ? worker_for_call(comm, where, bytes) : nullptr;
      if (worker) {
        WorkItem pull{};
        pull.kind = WorkKind::kCopies;
        pull.copies.sources[0] = source;
        pull.copies.destinations[0] = buffer;
        pull.copies.bytes[0] = bytes;
        pull.copies.count = 1;
        return run_on_worker(*worker, bytes, pull);
      }
      FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &stream));
      return copy_and_synchronize(where.backend, buffer, source, bytes, stream);
    }();
  }
  return finish_together(comm, local, clock);
}

Status alltoallv(Communicator& comm, const void* send, const std::size_t* send_bytes,
                 const std::size_t* send_offsets, void* recv, const std::size_t* recv_bytes,
                 const std::size_t* recv_offsets, bool eligible, bool* ran) {
  if (comm.hierarchy())
    return hierarchical_alltoallv(comm, *comm.hierarchy(), send, send_bytes, send_offsets, recv, recv_bytes,
                                  recv_offsets, eligible, ran);
  *ran = false;
  PhaseClock clock(EngineCollective::kAlltoallv);
  const int n = comm.size();
  const PeerReach reach = reach_of(comm);
  std::size_t send_span = 0;
  Placement where;
  Handshake mine{CollectiveKind::kAlltoallv, 0, 0, 0, {}, {},
                 exchange_signature(comm.rank(), n, send_bytes, recv_bytes)};
  if (eligible && reach.any) {
    for (int p = 0; p < n; ++p)
      if (send_bytes[p] > 0) send_span = std::max(send_span, send_offsets[p] + send_bytes[p]);
    where = placement_of(recv);
    const Placement from = placement_of(send);
    std::size_t largest = 0;
    for (int p = 0; p < n; ++p) largest = std::max({largest, send_bytes[p], recv_bytes[p]});
    mine.algorithm = from.backend == where.backend && from.device == where.device &&
                             ll_ready(comm, reach, where, largest)
                         ? kLlPath
                         : kCopyPaths;
    // Where GPU leaders copy for their GPU's ranks, they write the receive
    // buffers too.
    mine.eligible = where.backend && from.backend == where.backend &&
                    (reach.mapped
                         ? ok(comm.peer_memory().export_buffer(send, from.info, &mine.first)) &&
                               (!comm.by_gpu_leaders() ||
                                ok(comm.peer_memory().export_buffer(recv, where.info, &mine.second)))
                         : send_span <= comm.shm()->bytes());
  }
  std::vector<Handshake> all;
  bool everyone = false;
  FERRY_CHECK(agree(comm, mine, &all, &everyone, clock));
  if (!everyone) return Status::kOk;
  *ran = true;
  std::uint64_t to_others = 0;
  for (int p = 0; p < n; ++p) to_others += p == comm.rank() ? 0 : send_bytes[p];
  clock.carries(reach.carrier(), to_others);
  if (reach.mapped && all_chose(all, kLlPath))
    return finish_alone(
        run_ll_alltoallv(comm, where, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets), clock);

  // Each sender's offset of its block for each receiver.
  std::vector<std::uint64_t> my_offsets(send_offsets, send_offsets + n);
  std::vector<std::uint64_t> offsets(static_cast<std::size_t>(n) * n);
  const bool by_leaders = reach.mapped && comm.by_gpu_leaders();
  if (by_leaders) {
    // The leaders also need each receiver's blocks: where and how long.
    my_offsets.insert(my_offsets.end(), recv_offsets, recv_offsets + n);
    my_offsets.insert(my_offsets.end(), recv_bytes, recv_bytes + n);
    offsets.resize(static_cast<std::size_t>(n) * 3 * n);
  }
  FERRY_CHECK(comm.bootstrap().allgather(my_offsets.data(), offsets.data(), my_offsets.size() * sizeof(std::uint64_t)));
  clock.mark(EnginePhase::kHandshake);
  if (reach.shm)
    return finish_together(
        comm, run_shm_alltoallv(comm, where, send, send_span, offsets, recv, recv_bytes, recv_offsets), clock);
  if (by_leaders)
    return finish_together(comm, run_alltoallv_by_gpu_leaders(comm, all, where, send, recv, offsets), clock);

  // Each rank pulls its blocks from every peer with the copy engines, a few
  // streams in parallel; its own block is a local copy on a stream of its own.
  Status local = [&] {
    constexpr int kPeerStreams = 4;
    const int streams_used = 1 + std::min(kPeerStreams, n - 1);
    std::vector<gpu::Stream> streams(streams_used);
    FERRY_CHECK(where.backend->set_device(where.device));
    for (int i = 0; i < streams_used; ++i) FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &streams[i], i));
    std::vector<ExportedBuffer> wanted;
    for (int peer = 0; peer < n; ++peer)
      if (peer != comm.rank() && recv_bytes[peer] > 0) wanted.push_back(all[peer].first);
    std::vector<void*> mapped(wanted.size());
    FERRY_CHECK(comm.peer_memory().import_buffers(wanted.data(), wanted.size(), mapped.data()));
    std::vector<const void*> sources(n, send);
    for (int peer = 0, i = 0; peer < n; ++peer)
      if (peer != comm.rank() && recv_bytes[peer] > 0) sources[peer] = mapped[i++];

    std::size_t received = 0;
    for (int peer = 0; peer < n; ++peer) received += recv_bytes[peer];
    Worker* worker = n <= kMaxWorkerCopies ? worker_for_call(comm, where, received) : nullptr;
    WorkItem pulls{};
    pulls.kind = WorkKind::kCopies;
    for (int step = 0; step < n; ++step) {
      // Start with the next rank so that peers do not all read one rank at once.
      const int peer = (comm.rank() + step) % n;
      if (recv_bytes[peer] == 0) continue;
      const char* block =
          static_cast<const char*>(sources[peer]) + offsets[static_cast<std::size_t>(peer) * n + comm.rank()];
      if (worker) {
        CopyListArgs& list = pulls.copies;
        list.sources[list.count] = block;
        list.destinations[list.count] = static_cast<char*>(recv) + recv_offsets[peer];
        list.bytes[list.count++] = recv_bytes[peer];
        continue;
      }
      const gpu::Stream stream = step == 0 ? streams[0] : streams[1 + (step - 1) % (streams_used - 1)];
      FERRY_CHECK(where.backend->copy_async(static_cast<char*>(recv) + recv_offsets[peer], block, recv_bytes[peer],
                                            stream));
    }
    if (worker) return pulls.copies.count > 0 ? run_on_worker(*worker, received, pulls) : Status::kOk;
    for (gpu::Stream stream : streams) FERRY_CHECK(synchronize_stream(where.backend, stream));
    return Status::kOk;
  }();
  return finish_together(comm, local, clock);
}

Status wait_streams_until(gpu::Backend* backend, std::initializer_list<gpu::Stream> streams,
                          std::chrono::steady_clock::time_point deadline) {
  for (gpu::Stream stream : streams) GpuSpan::stream_finishing(stream);
  for (int polls = 0;; ++polls) {
    bool all_done = true;
    for (gpu::Stream stream : streams) {
      bool done = false;
      FERRY_CHECK(backend->stream_done(stream, &done));
      all_done = all_done && done;
    }
    if (all_done) return Status::kOk;
    if (device_waits_abandoned()) return Status::kPeerEnded;
    if (std::chrono::steady_clock::now() > deadline) return Status::kTimeout;
    if (polls > 4096) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

const char* engine_collective_name(EngineCollective which) {
  switch (which) {
    case EngineCollective::kAllreduce: return "allreduce";
    case EngineCollective::kBcast: return "bcast";
    case EngineCollective::kAlltoallv: return "alltoallv";
    case EngineCollective::kCount: break;
  }
  return "?";
}

EngineCallStats engine_call_stats(EngineCollective which) {
  const PhaseTotals& totals = g_phase_totals[static_cast<int>(which)];
  EngineCallStats stats{};
  stats.calls = totals.calls.load();
  stats.on_worker = totals.on_worker.load();
  for (int p = 0; p < static_cast<int>(EnginePhase::kCount); ++p)
    stats.mean_us[p] = stats.calls ? totals.nanoseconds[p].load() / 1e3 / stats.calls : 0;
  return stats;
}

}  // namespace ferry
