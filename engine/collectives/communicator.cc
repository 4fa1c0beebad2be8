#include "engine/collectives/communicator.h"

#include <algorithm>
#include <string>

#include "engine/collectives/hierarchy.h"
#include "engine/common/params.h"

namespace ferry {

Communicator::Communicator(std::unique_ptr<Bootstrap> bootstrap) : PeerGroup(std::move(bootstrap)) {}

Status Communicator::create(std::unique_ptr<Bootstrap> bootstrap, std::unique_ptr<Communicator>* out) {
  if (!bootstrap) return Status::kUnavailable;
  std::unique_ptr<Communicator> comm(new Communicator(std::move(bootstrap)));
  FERRY_CHECK(comm->connect());
  comm->no_worker_ = ranks_take_turns_on_a_gpu(comm->ranks());
  comm->on_one_gpu_ = ranks_share_one_gpu(comm->ranks());
  if (comm->no_worker_) FERRY_INFO(Coll, "ranks share a GPU without MPS: no engine worker on this communicator");
  const std::string& leading = params().gpu_leader;
  if (leading == "on" || (leading != "off" && comm->no_worker_)) comm->gpu_leader_ = gpu_leaders(comm->ranks());
  if (comm->by_gpu_leaders())
    FERRY_INFO(Coll, "ranks share a GPU: rank %d does the device work of this rank", comm->gpu_leader_[comm->rank()]);
  // Without it (kUnavailable on every rank), device calls across machines
  // are staged.
  if (comm->net()) {
    const Status status = Hierarchy::create(*comm, &comm->hierarchy_);
    if (!ok(status) && status != Status::kUnavailable) return status;
  }
  *out = std::move(comm);
  return Status::kOk;
}

Communicator::~Communicator() {
  workers_.clear();  // they may still use the streams' device and the LL buffers
  if (ll_own_) FERRY_LOG_IF_FAILED(ll_.backend->device_free(ll_own_));
  for (void* table : {ll_.buffer_table, ll_.block_table})
    if (table) FERRY_LOG_IF_FAILED(ll_.backend->device_free(table));
  if (simple_.peer_table) FERRY_LOG_IF_FAILED(simple_.backend->device_free(simple_.peer_table));
  for (auto& [key, cached] : simple_plans_) FERRY_LOG_IF_FAILED(simple_.backend->device_free(cached.steps));
  if (simple_own_) FERRY_LOG_IF_FAILED(simple_.backend->device_free(simple_own_));
  if (simple_.failed) FERRY_LOG_IF_FAILED(simple_.backend->pinned_free(simple_.failed));
  if (copy_push_own_) FERRY_LOG_IF_FAILED(copy_push_.backend->device_free(copy_push_own_));
}

int Communicator::gpu_leader_count() const {
  int leaders = 0;
  for (int r = 0; r < static_cast<int>(gpu_leader_.size()); ++r) leaders += gpu_leader_[r] == r;
  return leaders;
}

int Communicator::gpu_leaders_before_me() const {
  int before = 0;
  for (int r = 0; r < rank(); ++r) before += gpu_leader_[r] == r;
  return before;
}

Worker* Communicator::worker_for(gpu::Backend* backend, int device) {
  if (no_worker_) return nullptr;
  auto it = workers_.find({backend, device});
  if (it == workers_.end())
    it = workers_.emplace(std::make_pair(backend, device), Worker::create(backend, device)).first;
  return it->second.get();
}

bool Communicator::ll_possible(gpu::Backend* backend, int device) {
  if (!all_peers_mapped()) return false;
  if (ll_.backend && (ll_.backend != backend || ll_.device != device)) return false;
  return worker_for(backend, device) != nullptr;
}

Status Communicator::map_on_every_rank(gpu::Backend* backend, int device, std::size_t bytes, std::size_t zeroed,
                                       bool ready_here, void** own, std::vector<void*>* everyone) {
  const std::vector<char> zeros(zeroed, 0);
  // Peers' copies into an allocation that is not a whole number of 2 MiB
  // pages ran markedly slower (2x H200, copy engines both ways;
  // bench/copy-engine-pages, bench/RESULTS.md), most likely because it is
  // mapped with smaller pages.
  constexpr std::size_t kLargePage = std::size_t{2} << 20;
  bytes = (bytes + kLargePage - 1) / kLargePage * kLargePage;
  P2pTransport& p2p = transports().p2p();
  MemoryKey mine{};
  std::int32_t ready = ready_here && ok(backend->set_device(device)) && ok(backend->device_alloc(bytes, own)) &&
                       ok(backend->copy(*own, zeros.data(), zeroed)) && ok(p2p.register_memory(*own, bytes, &mine));
  std::vector<MemoryKey> all(size());
  FERRY_CHECK(bootstrap().allgather(&mine, all.data(), sizeof(mine)));
  everyone->assign(size(), nullptr);
  for (int r = 0; r < size() && ready; ++r) {
    (*everyone)[r] = *own;
    // Pinned: the LRU of peer mappings must never close these.
    if (r != rank()) ready = ok(p2p.map(r, all[r], &(*everyone)[r]));
  }
  std::vector<std::int32_t> readiness(size());
  FERRY_CHECK(bootstrap().allgather(&ready, readiness.data(), sizeof(ready)));
  for (std::int32_t r : readiness) {
    if (!r) {
      if (*own) FERRY_LOG_IF_FAILED(backend->device_free(*own));
      *own = nullptr;
      return Status::kUnavailable;
    }
  }
  return Status::kOk;
}

Status Communicator::table_past_inline(gpu::Backend* backend, std::size_t bytes, void** table) {
  *table = nullptr;
  return size() <= kInlineRanks ? Status::kOk : backend->device_alloc(bytes, table);
}

Status Communicator::ll_channel(gpu::Backend* backend, int device, LlChannel** channel) {
  if (ll_.backend) {
    *channel = &ll_;
    return Status::kOk;
  }
  // Zeroed: no flag matches before the first call.
  LlChannel made;
  made.backend = backend;
  made.device = device;
  const bool tables_made = ok(backend->set_device(device)) &&
                           ok(table_past_inline(backend, size() * sizeof(LlBlocks), &made.block_table)) &&
                           ok(table_past_inline(backend, size() * sizeof(void*), &made.buffer_table));
  if (!ok(map_on_every_rank(backend, device, kLlBufferBytes, kLlBufferBytes, tables_made, &ll_own_, &made.buffers))) {
    FERRY_WARN(Coll, "LL buffers could not be set up on every rank");
    for (void* table : {made.block_table, made.buffer_table})
      if (table) FERRY_LOG_IF_FAILED(backend->device_free(table));
    return Status::kUnavailable;
  }
  if (made.buffer_table) FERRY_CHECK(backend->copy(made.buffer_table, made.buffers.data(), size() * sizeof(void*)));
  FERRY_INFO(Coll, "LL receive buffers: %zu bytes per rank on device %d", kLlBufferBytes, device);
  ll_ = made;
  *channel = &ll_;
  return Status::kOk;
}

bool Communicator::simple_possible(gpu::Backend* backend, int device) const {
  if (!all_peers_mapped() || simple_.broken) return false;
  return !simple_.backend || (simple_.backend == backend && simple_.device == device);
}

Status Communicator::simple_channels(gpu::Backend* backend, int device, SimpleChannels** channels) {
  if (simple_.backend) {
    *channels = &simple_;
    return Status::kOk;
  }
  const int n = size();
  const int me = rank();
  SimpleChannels made;
  made.backend = backend;
  made.device = device;
  // A channel's block waits for the same channel's block on its peers, so
  // all of a kernel's blocks must fit the GPU at once (a block of 1024
  // threads takes an SM): otherwise two ranks' resident blocks could each
  // wait for the other's that cannot start.
  struct DeviceClaim {
    std::uint64_t key;
    std::int32_t multiprocessors;
    std::int32_t channels;
  };
  const DeviceClaim claim{backend->device_key(device), backend->multiprocessor_count(device),
                          static_cast<std::int32_t>(std::clamp<std::int64_t>(params().channels, 1, kSimpleMaxChannels))};
  std::vector<DeviceClaim> claims(n);
  FERRY_CHECK(bootstrap().allgather(&claim, claims.data(), sizeof(claim)));
  made.channels = kSimpleMaxChannels;
  bool shared_gpu = false;
  for (const DeviceClaim& c : claims) {
    int sharing = 0;
    for (const DeviceClaim& other : claims) sharing += other.key == c.key;
    shared_gpu = shared_gpu || (c.multiprocessors > 0 && sharing > 1);
    const int fits = c.multiprocessors > 0 ? std::max(1, c.multiprocessors / sharing) : kSimpleMaxChannels;
    made.channels = std::min({made.channels, static_cast<int>(c.channels), fits});
  }
  // Kernels of two processes on one GPU take turns (time slices, without
  // MPS): a block waiting for the other process's block waits a slice per
  // piece (measured on a 1 MiB ring allreduce of 4 ranks on 2 GPUs:
  // bench/RESULTS.md).
  if (shared_gpu) {
    FERRY_INFO(Coll, "ranks share a GPU: no ring, tree or chain on this communicator");
    simple_.broken = true;
    return Status::kUnavailable;
  }
  const std::vector<int> mine = simple_senders(me, n);
  made.peers.assign(n, SimplePeer{});
  for (int r = 0; r < n; ++r) {
    const std::vector<int> senders = r == me ? mine : simple_senders(r, n);
    made.peers[r].nsenders = static_cast<std::int32_t>(senders.size());
    const auto at = std::find(senders.begin(), senders.end(), me);
    made.peers[r].fifo_at = at == senders.end() ? -1 : static_cast<std::int32_t>(at - senders.begin());
    const auto own = std::find(mine.begin(), mine.end(), r);
    made.peers[r].own_fifo = own == mine.end() ? -1 : static_cast<std::int32_t>(own - mine.begin());
  }
  const std::size_t bytes = simple_buffer_bytes(n, made.channels, made.peers[me].nsenders);
  const bool flag_made = ok(backend->pinned_alloc(sizeof(std::int32_t), reinterpret_cast<void**>(&made.failed)));
  if (made.failed) *made.failed = 0;
  const bool table_made = ok(backend->set_device(device)) &&
                          ok(table_past_inline(backend, n * sizeof(SimplePeer), &made.peer_table));
  // Counters start at zero; slots need no initial value.
  std::vector<void*> buffers;
  if (!ok(map_on_every_rank(backend, device, bytes, simple_control_bytes(n), flag_made && table_made, &simple_own_,
                            &buffers))) {
    FERRY_WARN(Coll, "Simple protocol FIFOs could not be set up on every rank");
    if (made.failed) FERRY_LOG_IF_FAILED(backend->pinned_free(made.failed));
    if (made.peer_table) FERRY_LOG_IF_FAILED(backend->device_free(made.peer_table));
    simple_.broken = true;
    return Status::kUnavailable;
  }
  for (int r = 0; r < n; ++r) made.peers[r].buffer = buffers[r];
  if (made.peer_table) FERRY_CHECK(backend->copy(made.peer_table, made.peers.data(), n * sizeof(SimplePeer)));
  FERRY_INFO(Coll, "Simple protocol FIFOs: %zu bytes per rank on device %d (%d channels, %d senders)", bytes, device,
             made.channels, made.peers[me].nsenders);
  simple_ = made;
  *channels = &simple_;
  return Status::kOk;
}

void* Communicator::copy_push_slot(int receiver, int sender, int k) const {
  // Slots for the receiver's peers in rank order, itself left out.
  const int index = sender < receiver ? sender : sender - 1;
  return static_cast<char*>(copy_push_.buffers[receiver]) + kCopyPushControlBytes +
         (static_cast<std::size_t>(index) * 2 + k) * copy_push_.slot_bytes;
}

bool Communicator::copy_push_possible(gpu::Backend* backend, int device) const {
  if (!all_peers_mapped() || copy_push_.broken || !backend->stream_memory_ops())
    return false;
  return !copy_push_.backend || (copy_push_.backend == backend && copy_push_.device == device);
}

Status Communicator::copy_push_slots(gpu::Backend* backend, int device, CopyPushSlots** slots) {
  if (copy_push_.backend) {
    *slots = &copy_push_;
    return Status::kOk;
  }
  const int n = size();
  // Every rank takes the smallest slot any asks for, and all of a rank's
  // slots stay within 512 MiB however many peers it has.
  constexpr std::size_t kMostBytes = std::size_t{512} << 20;
  struct Claim {
    std::uint64_t device_key;
    std::uint64_t slot_bytes;
  };
  const Claim mine{backend->device_key(device),
                   static_cast<std::uint64_t>(std::clamp<std::int64_t>(
                       params().ce_slot_bytes, 4096, static_cast<std::int64_t>(kMostBytes / (2 * std::max(1, n - 1)))))};
  std::vector<Claim> claims(n);
  FERRY_CHECK(bootstrap().allgather(&mine, claims.data(), sizeof(mine)));
  CopyPushSlots made;
  made.backend = backend;
  made.device = device;
  made.slot_bytes = mine.slot_bytes;
  bool shared_gpu = false;
  for (const Claim& c : claims) {
    made.slot_bytes = std::min<std::size_t>(made.slot_bytes, c.slot_bytes / 4096 * 4096);
    for (const Claim& other : claims) shared_gpu = shared_gpu || (&other != &c && other.device_key == c.device_key);
  }
  // A stream waiting for a flag from another process on the same GPU waits
  // for that process's time slice (measured on an 8-byte call of two ranks
  // on one H200: bench/RESULTS.md). The emulated device has no time slices.
  if (shared_gpu && backend->execution_site() == gpu::ExecutionSite::kDevice) {
    FERRY_INFO(Coll, "ranks share a GPU: no copy-engine push on this communicator");
    copy_push_.broken = true;
    return Status::kUnavailable;
  }
  const std::size_t bytes = kCopyPushControlBytes + 2 * static_cast<std::size_t>(std::max(1, n - 1)) * made.slot_bytes;
  // Flags start at zero; slots need no initial value.
  const std::size_t flag_bytes = 2 * static_cast<std::size_t>(n) * sizeof(std::uint32_t);
  if (!ok(map_on_every_rank(backend, device, bytes, flag_bytes, true, &copy_push_own_, &made.buffers))) {
    FERRY_WARN(Coll, "copy-engine push slots could not be set up on every rank");
    copy_push_.broken = true;
    return Status::kUnavailable;
  }
  FERRY_INFO(Coll, "copy-engine push slots: %zu bytes per rank on device %d (%zu-byte slots)", bytes, device,
             made.slot_bytes);
  copy_push_ = made;
  *slots = &copy_push_;
  return Status::kOk;
}

Status Communicator::simple_plan(SimpleCollective collective, int root, std::size_t count, std::size_t element_bytes,
                                 const SimplePlan** plan, const SimpleStep** device_steps) {
  const auto key = std::make_tuple(static_cast<int>(collective), root, count, element_bytes);
  auto it = simple_plans_.find(key);
  if (it == simple_plans_.end()) {
    // A bounded cache: an application cycling through many sizes replans.
    constexpr std::size_t kMaxPlans = 64;
    if (simple_plans_.size() >= kMaxPlans) {
      for (auto& [old, cached] : simple_plans_) FERRY_LOG_IF_FAILED(simple_.backend->device_free(cached.steps));
      simple_plans_.clear();
    }
    CachedPlan made;
    FERRY_CHECK(plan_simple(collective, rank(), size(), root, count, element_bytes, simple_.channels, &made.plan));
    const std::size_t bytes = std::max<std::size_t>(1, made.plan.steps.size()) * sizeof(SimpleStep);
    FERRY_CHECK(simple_.backend->device_alloc(bytes, &made.steps));
    if (!made.plan.steps.empty()) {
      const Status copied = simple_.backend->copy(made.steps, made.plan.steps.data(), bytes);
      if (!ok(copied)) {
        FERRY_LOG_IF_FAILED(simple_.backend->device_free(made.steps));
        return copied;
      }
    }
    it = simple_plans_.emplace(key, std::move(made)).first;
  }
  *plan = &it->second.plan;
  *device_steps = static_cast<const SimpleStep*>(it->second.steps);
  return Status::kOk;
}

}  // namespace ferry
