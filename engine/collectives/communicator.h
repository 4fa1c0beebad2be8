// The engine communicator of the collectives: a peer group (its ranks, how
// this rank reaches each, the device resources calls reuse), its workers,
// and the buffers of the protocols that need every rank's (LL, Simple,
// copy-engine push).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "engine/bootstrap/bootstrap.h"
#include "engine/collectives/simple_protocol.h"
#include "engine/collectives/worker.h"
#include "engine/core/peer_group.h"
#include "engine/gpu/gpu.h"

namespace ferry {

class Hierarchy;

class Communicator : public PeerGroup {
 public:
  // Collective over the bootstrap's ranks.
  static Status create(std::unique_ptr<Bootstrap> bootstrap, std::unique_ptr<Communicator>* out);
  ~Communicator() override;

  // Whether the leader of each GPU does the device work of the ranks on it
  // (FERRY_GPU_LEADER; gpu_leaders), and which rank leads rank's GPU.
  bool by_gpu_leaders() const { return !gpu_leader_.empty(); }
  int gpu_leader(int rank) const { return gpu_leader_[rank]; }
  // How many GPU leaders there are, and how many of them come before this
  // rank (its slice of an allreduce they share).
  int gpu_leader_count() const;
  int gpu_leaders_before_me() const;
  // Every rank on one GPU (ranks_share_one_gpu).
  bool on_one_gpu() const { return on_one_gpu_; }

  // Where the ranks span machines and the network reaches them: the
  // machines' own communicators the collectives go by (hierarchy.h);
  // nullptr otherwise.
  Hierarchy* hierarchy() const { return hierarchy_.get(); }

  // The engine worker on device of backend, created on first use and kept;
  // nullptr when there is none (FERRY_WORKER=0, the backend has none, or
  // ranks_take_turns_on_a_gpu).
  Worker* worker_for(gpu::Backend* backend, int device);

  // The LL protocol's receive buffers (worker.h), one per rank, on the
  // device of this rank's first LL call; collective when it makes them.
  struct LlChannel {
    gpu::Backend* backend = nullptr;
    int device = -1;
    std::vector<void*> buffers;  // every rank's, mapped here
    std::uint64_t calls = 0;     // LL calls so far: the same on every rank
    // Device memory, past kInlineRanks ranks: buffers, for the worker
    // (LlAllreduceArgs::buffer_table), and an alltoallv's blocks, written
    // for each call (LlAlltoallvArgs::block_table).
    void* buffer_table = nullptr;
    void* block_table = nullptr;
  };
  // Fills what every LL call's arguments share about the ranks: their
  // receive buffers (inline and table) and who is who.
  template <typename LlArgs>
  void list_ll_buffers(const LlChannel& channel, LlArgs* args) const {
    for (int r = 0; r < size() && r < kInlineRanks; ++r) args->buffers[r] = channel.buffers[r];
    args->buffer_table = static_cast<void* const*>(channel.buffer_table);
    args->rank = rank();
    args->nranks = size();
  }
  // Whether an LL call with buffers on device of backend may run here: a
  // worker exists there, and the channel (if made) is on that device.
  bool ll_possible(gpu::Backend* backend, int device);
  // The channel, made on first use (collective: every rank calls it at the
  // same call).
  Status ll_channel(gpu::Backend* backend, int device, LlChannel** channel);

  // The Simple protocol's FIFOs (simple_protocol.h) for ring and tree: one
  // buffer per rank, on the device of this rank's first such call.
  struct SimpleChannels {
    gpu::Backend* backend = nullptr;
    int device = -1;
    int channels = 0;
    std::vector<SimplePeer> peers;  // every rank's buffer, mapped here, and FIFO indices
    void* peer_table = nullptr;     // peers in device memory, past kInlineRanks ranks
    std::int32_t* failed = nullptr;  // host word the kernel sets on a timeout
    // A call failed (ranks may disagree on the FIFO counters), or the
    // channels could not be made or must not be (ranks sharing a GPU): no
    // later call uses them.
    bool broken = false;
  };
  // Whether a ring or tree call with buffers on device of backend may run
  // here: every peer mapped, and the channels (if made) on that device and
  // not broken.
  bool simple_possible(gpu::Backend* backend, int device) const;
  // Made on first use (collective: every rank calls it at the same call);
  // kUnavailable on every rank when they cannot be.
  Status simple_channels(gpu::Backend* backend, int device, SimpleChannels** channels);
  // The plan of a collective over the channels and its steps in device
  // memory, made once per (collective, root, count, element size) and kept.
  Status simple_plan(SimpleCollective collective, int root, std::size_t count, std::size_t element_bytes,
                     const SimplePlan** plan, const SimpleStep** device_steps);

  // The copy-engine push allreduce's landing slots (collectives.cc,
  // run_copy_push): one buffer per rank, on the device of this rank's first
  // such call. It begins with the flags, 32-bit words that peers write from
  // their streams: copy_push_arrived(buffer, s), raised by sender s once a
  // chunk landed, and copy_push_consumed(buffer, r), raised by receiver r
  // once it reduced a chunk this rank pushed (so the slot may be refilled):
  // a word per rank each. Two slots per peer follow.
  struct CopyPushSlots {
    gpu::Backend* backend = nullptr;
    int device = -1;
    std::size_t slot_bytes = 0;
    std::vector<void*> buffers;  // every rank's, mapped here
    std::uint32_t sequence = 0;  // chunks so far: the same on every rank
    // A call failed (the ranks' flags may be out of step): no later call
    // uses the slots.
    bool broken = false;
  };
  // A whole large page, so the slots start on one (map_on_every_rank).
  static constexpr std::size_t kCopyPushControlBytes = std::size_t{2} << 20;
  static_assert(kCopyPushControlBytes % sizeof(std::uint32_t) == 0, "flags are whole words");
  std::uint32_t* copy_push_arrived(void* buffer, int sender) const {
    return static_cast<std::uint32_t*>(buffer) + sender;
  }
  std::uint32_t* copy_push_consumed(void* buffer, int receiver) const {
    return static_cast<std::uint32_t*>(buffer) + size() + receiver;
  }
  // Slot k (0 or 1) in receiver's buffer for what sender pushes.
  void* copy_push_slot(int receiver, int sender, int k) const;
  // Whether a cepush call with buffers on device of backend may run here:
  // every peer mapped, the backend has stream memory operations, and the
  // slots (if made) are on that device and not broken.
  bool copy_push_possible(gpu::Backend* backend, int device) const;
  // Made on first use (collective: every rank calls it at the same call);
  // kUnavailable on every rank when they cannot be.
  Status copy_push_slots(gpu::Backend* backend, int device, CopyPushSlots** slots);
  // Whether the slots are made, on device of backend.
  bool copy_push_made(gpu::Backend* backend, int device) const {
    return copy_push_.backend == backend && copy_push_.device == device;
  }
  // Held while a cepush call queues its work: blocking calls and the
  // nonblocking ones (queued by another thread) take the sequence in turn.
  std::mutex& copy_push_mutex() { return copy_push_mutex_; }

 private:
  explicit Communicator(std::unique_ptr<Bootstrap> bootstrap);

  // Collective: a buffer of bytes on device of this rank (its first zeroed
  // bytes zeroed; the size rounded up to whole 2 MiB pages), every rank's
  // mapped here into everyone (pinned). When
  // any rank failed, or passed ready_here false, kUnavailable on every rank
  // and nothing of this rank's kept.
  Status map_on_every_rank(gpu::Backend* backend, int device, std::size_t bytes, std::size_t zeroed,
                           bool ready_here, void** own, std::vector<void*>* everyone);
  // Device memory of bytes for a table kernels read, or nullptr (kOk) up to
  // kInlineRanks ranks, where arguments carry it inline.
  Status table_past_inline(gpu::Backend* backend, std::size_t bytes, void** table);

  bool no_worker_ = false;       // ranks_take_turns_on_a_gpu
  bool on_one_gpu_ = false;      // ranks_share_one_gpu
  std::vector<int> gpu_leader_;  // gpu_leaders, or empty: each rank does its own device work
  std::map<std::pair<gpu::Backend*, int>, std::unique_ptr<Worker>> workers_;
  LlChannel ll_;
  void* ll_own_ = nullptr;  // this rank's receive buffer
  SimpleChannels simple_;
  void* simple_own_ = nullptr;  // this rank's FIFOs
  CopyPushSlots copy_push_;
  void* copy_push_own_ = nullptr;  // this rank's landing slots
  std::mutex copy_push_mutex_;
  struct CachedPlan {
    SimplePlan plan;
    void* steps = nullptr;  // device memory
  };
  std::map<std::tuple<int, int, std::size_t, std::size_t>, CachedPlan> simple_plans_;
  std::unique_ptr<Hierarchy> hierarchy_;
};

}  // namespace ferry
