#include "mpi_shim/stats.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "engine/collectives/collectives.h"
#include "engine/collectives/tuner.h"
#include "engine/common/params.h"
#include "engine/core/traffic.h"
#include "engine/core/transport_table.h"
#include "mpi_shim/call_span.h"
#include "mpi_shim/peer_pt2pt.h"
#include "mpi_shim/staging.h"

namespace ferry::shim {
namespace {

struct Counters {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> by_route[kRouteCount] = {};
};

Counters counters[static_cast<int>(FunctionId::kCount)];

Counters& of(FunctionId id) { return counters[static_cast<int>(id)]; }

}  // namespace

const bool g_stats_enabled = params().stats;
const bool g_observing = params().stats || !params().trace.empty();

void record_call(FunctionId id) { of(id).calls.fetch_add(1, std::memory_order_relaxed); }

void record_route_taken(FunctionId id, Route route) {
  of(id).by_route[static_cast<int>(route)].fetch_add(1, std::memory_order_relaxed);
}

void record_bytes(FunctionId id, std::int64_t count, MPI_Datatype datatype) {
  if (count <= 0 || datatype == MPI_DATATYPE_NULL) return;
  int size = 0;
  if (PMPI_Type_size(datatype, &size) != MPI_SUCCESS) return;
  const auto bytes = static_cast<std::uint64_t>(count) * size;
  of(id).bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (CallSpan* span = CallSpan::current()) span->add_bytes(bytes);
}

void print_stats(int rank) {
  std::fprintf(stderr, "ferry stats rank %d: %-26s %10s %14s %8s %8s %8s\n", rank, "function", "calls", "bytes",
               route_name(Route::kEngine), route_name(Route::kStaged), route_name(Route::kPmpi));
  for (int i = 0; i < static_cast<int>(FunctionId::kCount); ++i) {
    const Counters& c = counters[i];
    const auto calls = c.calls.load();
    if (calls == 0) continue;
    std::fprintf(stderr, "ferry stats rank %d: %-26s %10llu %14llu %8llu %8llu %8llu\n", rank,
                 function_name(static_cast<FunctionId>(i)), static_cast<unsigned long long>(calls),
                 static_cast<unsigned long long>(c.bytes.load()),
                 static_cast<unsigned long long>(c.by_route[static_cast<int>(Route::kEngine)].load()),
                 static_cast<unsigned long long>(c.by_route[static_cast<int>(Route::kStaged)].load()),
                 static_cast<unsigned long long>(c.by_route[static_cast<int>(Route::kPmpi)].load()));
  }
  // Which algorithm the engine ran its allreduce calls with (over peer memory).
  for (int a = 0; a < static_cast<int>(AllreduceAlgorithm::kCount); ++a) {
    const auto calls = allreduce_choice_count(static_cast<AllreduceAlgorithm>(a));
    if (calls == 0) continue;
    std::fprintf(stderr, "ferry stats rank %d: engine allreduce algorithm %-10s %10llu\n", rank,
                 algorithm_info(static_cast<AllreduceAlgorithm>(a)).name, static_cast<unsigned long long>(calls));
  }
  for (int a = 0; a < static_cast<int>(BcastAlgorithm::kCount); ++a) {
    const auto calls = bcast_choice_count(static_cast<BcastAlgorithm>(a));
    if (calls == 0) continue;
    std::fprintf(stderr, "ferry stats rank %d: engine bcast algorithm %-10s %10llu\n", rank,
                 bcast_algorithm_info(static_cast<BcastAlgorithm>(a)).name, static_cast<unsigned long long>(calls));
  }
  // The step across machines of the calls by machine (hierarchy.h).
  for (TunedCollective collective : {TunedCollective::kAllreduceAcross, TunedCollective::kBcastAcross}) {
    for (int a = 0; a < static_cast<int>(AcrossAlgorithm::kCount); ++a) {
      const auto calls = across_choice_count(collective, static_cast<AcrossAlgorithm>(a));
      if (calls == 0) continue;
      std::fprintf(stderr, "ferry stats rank %d: across machines %-9s %-6s %10llu\n", rank,
                   collective == TunedCollective::kBcastAcross ? "bcast" : "allreduce",
                   across_algorithm_info(static_cast<AcrossAlgorithm>(a)).name, static_cast<unsigned long long>(calls));
    }
  }
  const peer::SendCounts sends = peer::send_counts();
  if (sends.straight_blocking + sends.straight_nonblocking + sends.bounced + sends.host_bounced + sends.pushed > 0)
    std::fprintf(stderr,
                 "ferry stats rank %d: peer-memory sends %llu copied from the send buffer (%llu blocking, %llu "
                 "nonblocking), %llu through bounce buffers, %llu through host bounce buffers; %llu receives copied "
                 "by their sender\n",
                 rank, static_cast<unsigned long long>(sends.straight_blocking + sends.straight_nonblocking),
                 static_cast<unsigned long long>(sends.straight_blocking),
                 static_cast<unsigned long long>(sends.straight_nonblocking),
                 static_cast<unsigned long long>(sends.bounced), static_cast<unsigned long long>(sends.host_bounced),
                 static_cast<unsigned long long>(sends.pushed));
  if (sends.net > 0)
    std::fprintf(stderr, "ferry stats rank %d: device sends to other machines over the net transport %llu\n", rank,
                 static_cast<unsigned long long>(sends.net));
  const StagingMemory staging = staging_memory();
  if (staging.pinned_allocations + staging.pageable_blocks > 0)
    std::fprintf(stderr,
                 "ferry stats rank %d: staging memory: %llu pinned blocks, at most %llu pinned bytes held; %llu "
                 "pageable blocks\n",
                 rank, static_cast<unsigned long long>(staging.pinned_allocations),
                 static_cast<unsigned long long>(staging.pinned_peak_bytes),
                 static_cast<unsigned long long>(staging.pageable_blocks));
  const NetTraffic net = net_traffic();
  const std::uint64_t p2p = traffic_bytes(TransportKind::kP2p), shm = traffic_bytes(TransportKind::kShm);
  if (p2p + shm + net.sent_bytes > 0)
    std::fprintf(stderr, "ferry stats rank %d: bytes by transport: p2p %llu, shm %llu, net %llu\n", rank,
                 static_cast<unsigned long long>(p2p), static_cast<unsigned long long>(shm),
                 static_cast<unsigned long long>(net.sent_bytes));
  if (net.sent_bytes + net.received_bytes > 0)
    std::fprintf(stderr, "ferry stats rank %d: net transport %llu bytes sent, %llu bytes received%s\n", rank,
                 static_cast<unsigned long long>(net.sent_bytes), static_cast<unsigned long long>(net.received_bytes),
                 net.straight_device_messages > 0
                     ? (", " + std::to_string(net.straight_device_messages) +
                        " device messages straight from and to device memory (GPUDirect RDMA)")
                           .c_str()
                     : "");
  for (int c = 0; c < static_cast<int>(EngineCollective::kCount); ++c) {
    const EngineCallStats engine = engine_call_stats(static_cast<EngineCollective>(c));
    if (engine.calls == 0) continue;
    std::fprintf(stderr,
                 "ferry stats rank %d: engine %-9s %10llu calls (%llu on the worker), mean us: set-up %.2f "
                 "handshake %.2f device %.2f finish %.2f\n",
                 rank, engine_collective_name(static_cast<EngineCollective>(c)),
                 static_cast<unsigned long long>(engine.calls), static_cast<unsigned long long>(engine.on_worker),
                 engine.mean_us[0], engine.mean_us[1], engine.mean_us[2], engine.mean_us[3]);
  }
  std::fflush(stderr);
}

}  // namespace ferry::shim
