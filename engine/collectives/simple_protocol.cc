#include "engine/collectives/simple_protocol.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>

#include "engine/core/gpu_span.h"
#include "engine/core/peer_watch.h"
#include "engine/core/reduce_common.h"

namespace ferry {
namespace {

bool overlaps(const ElementRange& a, const ElementRange& b) { return a.begin < b.end && b.begin < a.end; }
bool same(const ElementRange& a, const ElementRange& b) { return a.begin == b.begin && a.end == b.end; }

// The parts of the output a rank has stored so far: disjoint spans.
class WrittenSpans {
 public:
  enum class Coverage { kNone, kAll, kPart };

  Coverage coverage(const ElementRange& range) const {
    std::size_t covered = 0;
    for (auto it = first_overlapping(range); it != spans_.end() && it->first < range.end; ++it)
      covered += std::min(it->second, range.end) - std::max(it->first, range.begin);
    if (covered == 0) return Coverage::kNone;
    return covered == range.size() ? Coverage::kAll : Coverage::kPart;
  }

  void add(const ElementRange& range) {
    std::size_t begin = range.begin, end = range.end;
    auto it = first_overlapping({begin, end});
    // Merge every span that overlaps or touches the new one.
    if (it != spans_.begin()) {
      auto before = std::prev(it);
      if (before->second >= begin) it = before;
    }
    while (it != spans_.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = spans_.erase(it);
    }
    spans_[begin] = end;
  }

 private:
  std::map<std::size_t, std::size_t>::const_iterator first_overlapping(const ElementRange& range) const {
    auto it = spans_.upper_bound(range.begin);
    if (it != spans_.begin() && std::prev(it)->second > range.begin) --it;
    return it;
  }

  std::map<std::size_t, std::size_t> spans_;  // begin -> end
};

// Whether the first operation after ops[from - 1] that touches range
// replaces all of it without reading it: then a value stored there now
// would never be read.
bool overwritten_next(const Schedule& ops, std::size_t from, const ElementRange& range) {
  for (std::size_t k = from; k < ops.size(); ++k) {
    if (!overlaps(ops[k].range, range)) continue;
    return ops[k].kind == ScheduleOp::Kind::kRecvCopy && same(ops[k].range, range);
  }
  return false;
}

std::vector<int> ring_order(int nranks) {
  std::vector<int> order(nranks);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

}  // namespace

Status compile_simple_steps(const Schedule& ops, std::vector<SimpleStep>* steps) {
  steps->clear();
  WrittenSpans written;
  for (std::size_t i = 0; i < ops.size();) {
    const ScheduleOp& op = ops[i];
    SimpleStep step{};
    step.begin = op.range.begin;
    step.count = op.range.size();
    step.recv_peer = op.kind == ScheduleOp::Kind::kSend ? -1 : static_cast<std::int16_t>(op.peer);
    step.reduce = op.kind == ScheduleOp::Kind::kRecvReduce;
    const bool reads_local = op.kind != ScheduleOp::Kind::kRecvCopy;
    if (reads_local) {
      const WrittenSpans::Coverage coverage = written.coverage(op.range);
      if (coverage == WrittenSpans::Coverage::kPart) return Status::kInternal;
      step.local_from_output = coverage == WrittenSpans::Coverage::kAll;
    }
    std::size_t next = i;
    if (op.kind == ScheduleOp::Kind::kSend) {
      step.send_peers[step.nsends++] = static_cast<std::int16_t>(op.peer);
    }
    ++next;
    // The sends of the same range that follow take this step's value.
    while (next < ops.size() && step.nsends < kSimpleMaxSends && ops[next].kind == ScheduleOp::Kind::kSend &&
           same(ops[next].range, op.range)) {
      step.send_peers[step.nsends++] = static_cast<std::int16_t>(ops[next].peer);
      ++next;
    }
    if (step.recv_peer >= 0) {
      step.store_local = !overwritten_next(ops, next, op.range);
      if (step.store_local) written.add(op.range);
    }
    steps->push_back(step);
    i = next;
  }
  return Status::kOk;
}

std::vector<int> simple_senders(int rank, int nranks) {
  std::vector<int> senders;
  if (nranks < 2) return senders;
  senders.push_back((rank + nranks - 1) % nranks);
  for (const BinaryTree& tree : build_double_binary_tree(ring_order(nranks))) {
    senders.push_back(tree.parent[rank]);
    for (int child : tree.children[rank]) senders.push_back(child);
  }
  senders.erase(std::remove_if(senders.begin(), senders.end(), [&](int r) { return r < 0 || r == rank; }),
                senders.end());
  std::sort(senders.begin(), senders.end());
  senders.erase(std::unique(senders.begin(), senders.end()), senders.end());
  return senders;
}

std::vector<SimpleStepRef> simple_step_order(std::uint64_t regions, std::uint32_t full_steps,
                                             std::uint32_t last_steps, int channel, int channels, int group) {
  std::vector<SimpleStepRef> order;
  const std::uint64_t stride = static_cast<std::uint64_t>(channels);
  for (std::uint64_t first = channel; first < regions;) {
    const int members = simple_group_members(first, regions, stride, group);
    for (std::uint32_t s = 0;; ++s) {
      bool any = false;
      for (int g = 0; g < members; ++g) {
        const std::uint64_t region = first + g * stride;
        if (s < (region + 1 == regions ? last_steps : full_steps)) {
          order.push_back({region, s});
          any = true;
        }
      }
      if (!any) break;
    }
    first += members * stride;
  }
  return order;
}

std::size_t simple_buffer_bytes(int nranks, int channels, int nsenders) {
  return simple_slot_offset(nranks, channels, nsenders, 0, 0);
}

std::size_t simple_piece_bytes(std::size_t bytes, int parts, int channels) {
  const std::size_t pieces = static_cast<std::size_t>(parts) * channels * kSimpleRegionsInFlight;
  const std::size_t wanted = (bytes + pieces - 1) / pieces;
  return std::clamp<std::size_t>((wanted + 15) / 16 * 16, kSimpleMinPieceBytes, kSimpleSlotBytes);
}

Status plan_simple(SimpleCollective collective, int rank, int nranks, int root, std::size_t count,
                   std::size_t element_bytes, int channels, SimplePlan* plan) {
  if (element_bytes == 0 || 16 % element_bytes != 0 || channels < 1 || root < 0 || root >= nranks)
    return Status::kInvalidArgument;
  const std::size_t align = 16 / element_bytes;
  const Ring ring = ring_order(nranks);
  const std::array<BinaryTree, 2> trees = build_double_binary_tree(ring);
  // One piece per ring slice, per tree half, or per chain region.
  const int parts = collective == SimpleCollective::kRingAllreduce   ? nranks
                    : collective == SimpleCollective::kTreeAllreduce ? 2
                                                                     : 1;
  const std::size_t piece_elements = simple_piece_bytes(count * element_bytes, parts, channels) / element_bytes;
  const std::size_t region = parts * piece_elements;
  auto schedule_of = [&](std::size_t elements) {
    switch (collective) {
      case SimpleCollective::kRingAllreduce: return ring_allreduce(ring, rank, elements, align);
      case SimpleCollective::kTreeAllreduce: return tree_allreduce(trees, rank, elements, align, piece_elements);
      case SimpleCollective::kChainBcast: break;
    }
    return chain_broadcast(ring, root, rank, elements);
  };
  *plan = SimplePlan{};
  plan->region_elements = region;
  plan->regions = (count + region - 1) / region;
  if (plan->regions == 0) return Status::kOk;
  const std::size_t last = count - (plan->regions - 1) * region;
  std::vector<SimpleStep> full, tail;
  FERRY_CHECK(compile_simple_steps(schedule_of(region), &full));
  FERRY_CHECK(compile_simple_steps(schedule_of(last), &tail));
  for (const std::vector<SimpleStep>* steps : {&full, &tail})
    for (const SimpleStep& step : *steps)
      if (step.count > piece_elements) return Status::kInternal;
  plan->full_steps = static_cast<std::uint32_t>(full.size());
  plan->last_steps = static_cast<std::uint32_t>(tail.size());
  plan->steps = std::move(full);
  plan->steps.insert(plan->steps.end(), tail.begin(), tail.end());
  return Status::kOk;
}

namespace {

std::uint64_t load_acquire(const std::uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
void store_release(std::uint64_t* word, std::uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }

// The executor on host views of the device buffers.
class HostSimple {
 public:
  HostSimple(gpu::Backend* backend, const SimpleArgs& args)
      : args_(args), timeout_(std::chrono::milliseconds(args.timeout_ms)) {
    const auto* table = args.peer_table ? static_cast<const SimplePeer*>(backend->host_view(args.peer_table)) : nullptr;
    for (int r = 0; r < args.nranks; ++r) {
      peers_[r] = r < kInlineRanks ? args.peers[r] : table[r];
      buffers_[r] = static_cast<char*>(backend->host_view(peers_[r].buffer));
    }
    steps_ = static_cast<const SimpleStep*>(backend->host_view(args.steps));
    input_ = static_cast<const char*>(backend->host_view(args.input));
    output_ = static_cast<char*>(backend->host_view(args.output));
  }

  template <typename T, ReduceOp Op>
  void run() {
    const std::size_t element = sizeof(T);
    const int me = args_.rank;
    for (int channel = 0; channel < args_.channels && ok(status_); ++channel) {
      const SimpleControl own = control(me, channel);
      for (const SimpleStepRef& ref : simple_step_order(args_.regions, args_.full_steps, args_.last_steps, channel,
                                                        args_.channels, args_.group)) {
        const bool last = ref.region + 1 == args_.regions;
        const SimpleStep& step = steps_[(last ? args_.full_steps : 0) + ref.step];
        const std::size_t offset = (ref.region * args_.region_elements + step.begin) * element;
        const T* received = nullptr;
        if (step.recv_peer >= 0) {
          if (!wait_until(&own.tail[step.recv_peer], own.taken[step.recv_peer] + 1)) return;
          received = reinterpret_cast<const T*>(
              buffers_[me] + simple_slot_offset(args_.nranks, channel, peers_[me].nsenders,
                                                peers_[step.recv_peer].own_fifo,
                                                own.taken[step.recv_peer] % kSimpleSlots));
        }
        T* destinations[kSimpleMaxSends];
        for (int d = 0; d < step.nsends; ++d) {
          const int peer = step.send_peers[d];
          if (!wait_until(&own.head[peer], own.sent[peer] + 1 > kSimpleSlots ? own.sent[peer] + 1 - kSimpleSlots : 0))
            return;
          destinations[d] = reinterpret_cast<T*>(
              buffers_[peer] + simple_slot_offset(args_.nranks, channel, peers_[peer].nsenders, peers_[peer].fifo_at,
                                                  own.sent[peer] % kSimpleSlots));
        }
        const T* local = reinterpret_cast<const T*>((step.local_from_output ? output_ : input_) + offset);
        T* out = reinterpret_cast<T*>(output_ + offset);
        for (std::size_t i = 0; i < step.count; ++i) {
          T value = received ? (step.reduce ? reduce<T, Op>(local[i], received[i]) : received[i]) : local[i];
          if (step.store_local) out[i] = value;
          for (int d = 0; d < step.nsends; ++d) destinations[d][i] = value;
        }
        for (int d = 0; d < step.nsends; ++d) {
          const int peer = step.send_peers[d];
          store_release(&control(peer, channel).tail[args_.rank], ++own.sent[peer]);
        }
        if (received) store_release(&control(step.recv_peer, channel).head[args_.rank], ++own.taken[step.recv_peer]);
      }
    }
  }

  Status status() const { return status_; }

 private:
  SimpleControl control(int rank, int channel) { return simple_control(buffers_[rank], channel, args_.nranks); }

  // Waits until *word >= target; false (and the status set) on timeout, or
  // once a peer has ended (peer_watch.h).
  bool wait_until(const std::uint64_t* word, std::uint64_t target) {
    for (unsigned spins = 0; load_acquire(word) < target; ++spins) {
      if (spins > 64) sched_yield();  // ranks may outnumber cores
      if ((spins & 1023) == 0 && device_waits_abandoned()) {
        status_ = Status::kTimeout;
        return false;
      }
      if (args_.timeout_ms && (spins & 1023) == 0 && std::chrono::steady_clock::now() - start_ > timeout_) {
        FERRY_WARN(Coll, "rank %d: no progress from a peer in a ring, tree or chain collective for %u ms", args_.rank,
                   args_.timeout_ms);
        status_ = Status::kTimeout;
        return false;
      }
    }
    return true;
  }

  const SimpleArgs& args_;
  std::vector<SimplePeer> peers_ = std::vector<SimplePeer>(args_.nranks);
  std::vector<char*> buffers_ = std::vector<char*>(args_.nranks);
  const SimpleStep* steps_ = nullptr;
  const char* input_ = nullptr;
  char* output_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  Status status_ = Status::kOk;
};

}  // namespace

Status run_simple_on_host(gpu::Backend* backend, const SimpleArgs& args) {
  HostSimple executor(backend, args);
  if (!dispatch_reduction(args.type, args.op, executor)) return Status::kUnsupported;
  return executor.status();
}

Status launch_simple(gpu::Backend* backend, const SimpleArgs& args, gpu::Stream stream) {
  if (args.nranks < 1 || (args.nranks > kInlineRanks && !args.peer_table) || args.channels < 1 ||
      args.channels > kSimpleMaxChannels ||
      args.group < 1 || args.group >= kSimpleSlots)
    return Status::kInvalidArgument;
  if (args.regions == 0 || args.nranks == 1) return Status::kOk;
  if (backend->execution_site() == gpu::ExecutionSite::kHost) {
    FERRY_CHECK(synchronize_stream(backend, stream));
    return run_simple_on_host(backend, args);
  }
#ifdef FERRY_HAVE_GPU_KERNELS
  return gpu_launch_simple(args, stream);
#else
  return Status::kUnsupported;
#endif
}

}  // namespace ferry
