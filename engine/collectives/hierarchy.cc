#include "engine/collectives/hierarchy.h"

#include <algorithm>
#include <chrono>

#include "engine/collectives/algorithms/algorithms.h"
#include "engine/collectives/call.h"
#include "engine/collectives/tuner.h"
#include "engine/common/params.h"

namespace ferry {

using namespace coll;  // call.h, algorithms/algorithms.h

Status Hierarchy::create(Communicator& comm, std::unique_ptr<Hierarchy>* out) {
  const std::vector<RankIdentity>& ranks = comm.ranks();
  const int n = comm.size();
  std::unique_ptr<Hierarchy> h(new Hierarchy());
  h->machine_of_.assign(n, -1);
  h->local_index_.assign(n, -1);
  for (int r = 0; r < n; ++r) {
    int m = 0;
    while (m < h->machines() && !same_machine(ranks[h->members_[m][0]], ranks[r])) ++m;
    if (m == h->machines()) h->members_.emplace_back();
    h->machine_of_[r] = m;
    h->local_index_[r] = static_cast<int>(h->members_[m].size());
    h->members_[m].push_back(r);
  }
  h->shards_ = n;
  for (const std::vector<int>& machine : h->members_)
    h->shards_ = std::min(h->shards_, static_cast<int>(machine.size()));

  // Divided by machine, key = rank: node ranks are the local indices.
  std::unique_ptr<Bootstrap> part;
  Status status = comm.bootstrap().split(h->machine_of_[comm.rank()], comm.rank(), &part);
  if (ok(status)) status = Communicator::create(std::move(part), &h->node_);
  const bool usable = ok(status) && h->node_->rank() == h->local_index_[comm.rank()] &&
                      (h->node_->size() == 1 || h->node_->all_peers_mapped() || h->node_->shm());
  std::int32_t mine = usable ? 1 : 0;
  std::vector<std::int32_t> all(n);
  FERRY_CHECK(comm.bootstrap().allgather(&mine, all.data(), sizeof(mine)));
  for (std::int32_t v : all) {
    if (!v) {
      FERRY_INFO(Coll, "no collectives by machine: %s", ok(status) ? "a machine's ranks have no engine transport"
                                                                   : status_name(status));
      return Status::kUnavailable;
    }
  }
  FERRY_INFO(Coll, "collectives by machine: %d machines, this one with %d ranks, %d shards", h->machines(),
             h->node_->size(), h->shards_);
  *out = std::move(h);
  return Status::kOk;
}

namespace {

// The net transport's tags for alltoallv blocks and the network's timing
// (algorithms/net.cc has the others).
constexpr int kNetAlltoallvTag = 3;
constexpr int kNetTimingTag = 7;

// The network's timing: 8-byte round trips (the median, after a few to
// warm up) and 4 MiB messages each answered by 8 bytes (the fastest), in
// host memory, the provider's own path: the device copies that every
// algorithm adds alike are priced apart (tuner_across.cc).
constexpr int kWarmRoundTrips = 5;
constexpr int kTimedRoundTrips = 31;
constexpr std::size_t kTimedMessageBytes = std::size_t{4} << 20;
constexpr int kTimedMessages = 3;

// Rank a times, rank b answers; the figures on a.
Status time_network(NetTransport& net, int me, int a, int b, double* hop_us, double* gbps) {
  const bool timer = me == a;
  const int peer = timer ? b : a;
  const auto deadline = handshake_deadline();
  std::vector<char> small(8, 0), large(kTimedMessageBytes, 1);
  // The timer sends bytes of large and waits for 8 back; the other side
  // the reverse. Microseconds on the timer.
  auto round_trip = [&](std::size_t bytes, double* us) -> Status {
    Completion sent, received;
    const auto start = std::chrono::steady_clock::now();
    if (timer) {
      FERRY_CHECK(net.post_recv(peer, small.data(), small.size(), kNetTimingTag, &received));
      FERRY_CHECK(net.post_send(peer, large.data(), bytes, kNetTimingTag, &sent));
      FERRY_CHECK(net.wait_all({&sent, &received}, deadline));
    } else {
      FERRY_CHECK(net.post_recv(peer, large.data(), bytes, kNetTimingTag, &received));
      FERRY_CHECK(net.wait_all({&received}, deadline));
      FERRY_CHECK(net.post_send(peer, small.data(), small.size(), kNetTimingTag, &sent));
      FERRY_CHECK(net.wait_all({&sent}, deadline));
    }
    *us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    return Status::kOk;
  };
  std::vector<double> trips;
  for (int i = 0; i < kWarmRoundTrips + kTimedRoundTrips; ++i) {
    double us = 0;
    FERRY_CHECK(round_trip(8, &us));
    if (i >= kWarmRoundTrips) trips.push_back(us);
  }
  std::nth_element(trips.begin(), trips.begin() + trips.size() / 2, trips.end());
  const double trip_us = trips[trips.size() / 2];
  double fastest_us = 0;
  for (int i = 0; i < kTimedMessages; ++i) {
    double us = 0;
    FERRY_CHECK(round_trip(kTimedMessageBytes, &us));
    fastest_us = i == 0 ? us : std::min(fastest_us, us);
  }
  *hop_us = trip_us / 2;
  // The answer's trip back is not the large message's.
  const double moving_us = fastest_us > trip_us ? fastest_us - trip_us / 2 : fastest_us;
  *gbps = double(kTimedMessageBytes) / (moving_us * 1e3);
  return Status::kOk;
}

// Below FERRY_NET_MIN_BYTES the steps by machine (each a copy to or from
// the device and a network message) take longer than staging the whole
// call through the real MPI (bench/RESULTS.md): every rank declines such
// calls, after the handshake that checks their arguments.
bool staging_serves_sooner(std::size_t bytes) {
  return bytes < static_cast<std::size_t>(std::max<std::int64_t>(params().net_min_bytes, 0));
}

// A collective of the node communicator that every rank of the machine
// enters eligible. One that did not run (a protocol's buffers could not be
// made) is asked once more: the engine then takes another of its paths.
template <typename Call>
Status on_node(Call call) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool ran = false;
    FERRY_CHECK(call(&ran));
    if (ran) return Status::kOk;
  }
  FERRY_WARN(Coll, "a machine's engine refused a step of a collective across machines");
  return Status::kInternal;
}

// The shard of count elements that index s of S holds (the first count % S
// one element longer).
ElementRange shard(int s, int shards, std::size_t count) {
  const std::size_t base = count / shards, longer = count % shards;
  const std::size_t begin = s * base + std::min<std::size_t>(s, longer);
  return {begin, begin + base + (static_cast<std::size_t>(s) < longer ? 1 : 0)};
}

// Every rank of the machine gets the S shards from their holders (node
// ranks 0 .. S-1), in place in buffer.
Status gather_shards(Communicator& node, int shards, void* buffer, std::size_t count, std::size_t element) {
  const int n = node.size();
  if (n == 1) return Status::kOk;
  const int me = node.rank();
  std::vector<std::size_t> send_bytes(n, 0), send_offsets(n, 0), recv_bytes(n, 0), recv_offsets(n, 0);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    if (me < shards) {
      const ElementRange mine = shard(me, shards, count);
      send_bytes[p] = mine.size() * element;
      send_offsets[p] = mine.begin * element;
    }
    if (p < shards) {
      const ElementRange theirs = shard(p, shards, count);
      recv_bytes[p] = theirs.size() * element;
      recv_offsets[p] = theirs.begin * element;
    }
  }
  // Blocks are disjoint: a rank reads only its own shard while the others'
  // land around it.
  const Status gathered = on_node([&](bool* ran) {
    return alltoallv(node, buffer, send_bytes.data(), send_offsets.data(), buffer, recv_bytes.data(),
                     recv_offsets.data(), true, ran);
  });
  if (gathered != Status::kInternal) return gathered;
  // Without an exchange of blocks (host shared memory too small for them),
  // a bcast from each holder.
  for (int s = 0; s < shards; ++s) {
    const ElementRange part = shard(s, shards, count);
    if (part.size() == 0) continue;
    FERRY_CHECK(on_node([&](bool* ran) {
      return bcast(node, at(buffer, part.begin * element), part.size() * element, s, true, ran);
    }));
  }
  return Status::kOk;
}

}  // namespace

Status Hierarchy::network(Communicator& comm, LinkCost* out) {
  // Between two machines ring and chain win at any price: nothing to time.
  if (machines() < 3) {
    *out = link_cost(LinkKind::kNet);
    return Status::kOk;
  }
  if (!network_measured_) {
    // The first two machines' leaders time it; every rank takes their
    // figures, or the model's assumed network where the timing failed.
    const int a = rank_at(0, 0), b = rank_at(1, 0), me = comm.rank();
    double mine[2] = {0, 0};
    if (me == a || me == b) {
      const Status timed = time_network(*comm.net(), me, a, b, &mine[0], &mine[1]);
      if (!ok(timed)) FERRY_WARN(Coll, "timing the network between machines failed: %s", status_name(timed));
    }
    std::vector<double> all(2 * static_cast<std::size_t>(comm.size()));
    FERRY_CHECK(comm.bootstrap().allgather(mine, all.data(), sizeof mine));
    network_ = link_cost(LinkKind::kNet);
    if (all[2 * a] > 0 && all[2 * a + 1] > 0) {
      network_.hop_us = all[2 * a];
      network_.bandwidth_gbps = all[2 * a + 1];
    }
    network_measured_ = true;
    FERRY_INFO(Coll, "the network between machines, as priced: %.2f us a hop, %.2f GB/s (%s)", network_.hop_us,
               network_.bandwidth_gbps, all[2 * a] > 0 ? "timed" : "assumed");
  }
  *out = network_;
  return Status::kOk;
}

Status hierarchical_allreduce(Communicator& comm, Hierarchy& h, const void* send, void* recv, std::size_t count,
                              DataType type, ReduceOp op, bool eligible, bool* ran) {
  *ran = false;
  PhaseClock clock(EngineCollective::kAllreduce);
  Handshake mine{CollectiveKind::kAllreduce, 0, 0, send == nullptr, {}, {}, reduction_signature(count, type, op)};
  const Placement where = placement_of(recv);
  const Placement in = send ? placement_of(send) : where;
  mine.eligible = eligible && count > 0 && reduction_defined(type, op) && where.backend &&
                  in.backend == where.backend && in.device == where.device;
  std::vector<Handshake> all;
  bool everyone = false;
  FERRY_CHECK(agree(comm, mine, &all, &everyone, clock));
  if (!everyone || staging_serves_sooner(count * data_type_size(type))) return Status::kOk;
  *ran = true;
  const Status local = [&] {
    Communicator& node = h.node();
    FERRY_CHECK(on_node([&](bool* node_ran) { return allreduce(node, send, recv, count, type, op, true, node_ran); }));
    const int index = h.local_index(comm.rank());
    const std::size_t element = data_type_size(type);
    // Every rank picks the same step across machines (from the call's
    // bytes, the largest shard and the network), whether or not it holds a
    // shard.
    LinkCost network{};
    FERRY_CHECK(h.network(comm, &network));
    const AcrossAlgorithm across =
        choose_allreduce_across(tune_rules(), count * element, shard(0, h.shards(), count).size() * element,
                                h.machines(), network);
    if (trace_enabled()) note_traced_algorithm(across_algorithm_info(across).name);
    if (index < h.shards()) {
      std::vector<int> holders;
      for (int m = 0; m < h.machines(); ++m) holders.push_back(h.rank_at(m, index));
      const ElementRange part = shard(index, h.shards(), count);
      void* mine = at(recv, part.begin * element);
      FERRY_CHECK(across == AcrossAlgorithm::kTree
                      ? run_net_tree_allreduce(comm, *comm.net(), holders, where, mine, part.size(), type, op)
                      : run_net_ring_allreduce(comm, *comm.net(), holders, where, mine, part.size(), type, op));
      if (index == 0) count_across_run(TunedCollective::kAllreduceAcross, across);
    }
    return gather_shards(node, h.shards(), recv, count, element);
  }();
  return finish_together(comm, local, clock);
}

Status hierarchical_bcast(Communicator& comm, Hierarchy& h, void* buffer, std::size_t bytes, int root,
                          bool eligible, bool* ran) {
  *ran = false;
  PhaseClock clock(EngineCollective::kBcast);
  Handshake mine{CollectiveKind::kBcast, 0, 0, 0, {}, {}, rooted_signature(bytes, root)};
  const Placement where = placement_of(buffer);
  mine.eligible = eligible && bytes > 0 && root >= 0 && root < comm.size() && where.backend;
  std::vector<Handshake> all;
  bool everyone = false;
  FERRY_CHECK(agree(comm, mine, &all, &everyone, clock));
  if (!everyone || staging_serves_sooner(bytes)) return Status::kOk;
  *ran = true;
  const Status local = [&] {
    // The leaders: the root for its machine, the first rank for the others,
    // listed from the root's machine on (a chain, or a tree rooted at the
    // first).
    const int root_machine = h.machine_of(root);
    auto leader_of = [&](int m) { return m == root_machine ? root : h.rank_at(m, 0); };
    std::vector<int> leaders;
    for (int i = 0; i < h.machines(); ++i) leaders.push_back(leader_of((root_machine + i) % h.machines()));
    const int leader = leader_of(h.machine_of(comm.rank()));
    LinkCost network{};
    FERRY_CHECK(h.network(comm, &network));
    if (leader == comm.rank()) {
      const AcrossAlgorithm across = choose_bcast_across(tune_rules(), bytes, h.machines(), network);
      if (trace_enabled()) note_traced_algorithm(across_algorithm_info(across).name);
      FERRY_CHECK(across == AcrossAlgorithm::kTree ? run_net_tree_bcast(*comm.net(), leaders, comm.rank(), buffer, bytes)
                                                   : run_net_chain_bcast(*comm.net(), leaders, comm.rank(), buffer,
                                                                         bytes));
      count_across_run(TunedCollective::kBcastAcross, across);
    }
    return on_node([&](bool* node_ran) {
      return bcast(h.node(), buffer, bytes, h.local_index(leader), true, node_ran);
    });
  }();
  return finish_together(comm, local, clock);
}

Status hierarchical_alltoallv(Communicator& comm, Hierarchy& h, const void* send, const std::size_t* send_bytes,
                              const std::size_t* send_offsets, void* recv, const std::size_t* recv_bytes,
                              const std::size_t* recv_offsets, bool eligible, bool* ran) {
  *ran = false;
  PhaseClock clock(EngineCollective::kAlltoallv);
  const int n = comm.size(), me = comm.rank();
  Handshake mine{CollectiveKind::kAlltoallv, 0, 0, 0, {}, {}, exchange_signature(me, n, send_bytes, recv_bytes)};
  const Placement where = placement_of(recv), from = placement_of(send);
  std::size_t sent = 0;
  for (int p = 0; p < n; ++p) sent += send_bytes[p];
  mine.eligible = eligible && where.backend && from.backend == where.backend;
  // Whether this rank's blocks are worth the steps by machine: the call goes
  // so when any rank's are.
  mine.algorithm = staging_serves_sooner(sent) ? 0 : 1;
  std::vector<Handshake> all;
  bool everyone = false;
  FERRY_CHECK(agree(comm, mine, &all, &everyone, clock));
  bool worth = false;
  for (const Handshake& other : all) worth = worth || other.algorithm == 1;
  if (!everyone || !worth) return Status::kOk;
  *ran = true;
  const Status local = [&] {
    // Every block to and from another machine in flight at once over the
    // network, while the machine's own blocks go through its engine.
    NetTransport& net = *comm.net();
    std::vector<Completion> done(2 * static_cast<std::size_t>(n));
    std::vector<Completion*> waits;
    for (int step = 1; step < n; ++step) {
      const int to = (me + step) % n, from_rank = (me + n - step) % n;
      if (h.machine_of(from_rank) != h.machine_of(me)) {
        FERRY_CHECK(net.post_recv(from_rank, at(recv, recv_offsets[from_rank]), recv_bytes[from_rank], kNetAlltoallvTag,
                                  &done[2 * from_rank]));
        waits.push_back(&done[2 * from_rank]);
      }
      if (h.machine_of(to) != h.machine_of(me)) {
        FERRY_CHECK(net.post_send(to, at(send, send_offsets[to]), send_bytes[to], kNetAlltoallvTag, &done[2 * to + 1]));
        waits.push_back(&done[2 * to + 1]);
      }
    }
    const int machine = h.machine_of(me), local_ranks = h.machine_size(machine);
    std::vector<std::size_t> node_send(local_ranks), node_send_at(local_ranks), node_recv(local_ranks),
        node_recv_at(local_ranks);
    for (int i = 0; i < local_ranks; ++i) {
      const int r = h.rank_at(machine, i);
      node_send[i] = send_bytes[r];
      node_send_at[i] = send_offsets[r];
      node_recv[i] = recv_bytes[r];
      node_recv_at[i] = recv_offsets[r];
    }
    FERRY_CHECK(on_node([&](bool* node_ran) {
      return alltoallv(h.node(), send, node_send.data(), node_send_at.data(), recv, node_recv.data(),
                       node_recv_at.data(), true, node_ran);
    }));
    return net.wait_all(waits, handshake_deadline());
  }();
  return finish_together(comm, local, clock);
}

}  // namespace ferry
