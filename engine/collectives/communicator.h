// The engine communicator: the ranks of one application communicator, what
// each one is (host, process, device), how this rank reaches each peer, and
// the resources its collectives reuse from call to call.
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
#include "engine/gpu/gpu.h"
#include "engine/topology/system_graph.h"
#include "engine/transport/p2p.h"
#include "engine/transport/shm.h"

namespace ferry {

// What each rank tells the others at set-up.
struct RankIdentity {
  std::uint64_t host_hash;  // same value on every process of one machine (boot)
  std::int32_t pid;
  std::int32_t backend;     // gpu::backend_id of the process's active backend
  std::int32_t device_count;
  std::int32_t has_device;   // it had chosen a device at set-up; then:
  std::uint64_t device_key;  // gpu::Backend::device_key of that device
  std::int32_t takes_turns;  // it runs kernels of processes in turns (gpu::Backend::processes_take_turns)
  std::int32_t physical_devices;  // gpu::Backend::physical_devices
};
static_assert(sizeof(RankIdentity) == 40, "RankIdentity travels between processes; keep its layout fixed");

// Whether two ranks in two processes use one GPU of one machine whose
// processes' kernels take turns (CUDA without MPS; one process's kernels run
// at once). A resident kernel (the engine worker) then holds the GPU through
// its process's time slices: a call waits out the other process's slice at
// every step (2.5 ms an 8-byte LL allreduce on one H200), so such a
// communicator runs no worker.
bool ranks_take_turns_on_a_gpu(const std::vector<RankIdentity>& ranks);

// Whether every rank uses one and the same GPU (one machine, one device
// backend, one device key; each had chosen its device at set-up), as
// several processes under MPS do: their LL lines then stay in that GPU's
// memory.
bool ranks_share_one_gpu(const std::vector<RankIdentity>& ranks);

// For each rank, the lowest rank on its GPU (one machine, one device
// backend, one device key); empty when no two ranks share a GPU.
std::vector<int> gpu_leaders(const std::vector<RankIdentity>& ranks);

// How a rank reaches a peer's device buffers.
enum class PeerTransport : int { kNone = 0, kP2p, kShm };
const char* peer_transport_name(PeerTransport transport);

// The transports the settings let the engine use between ranks.
struct AllowedTransports {
  bool p2p = true;
  bool shm = true;
};

// FERRY_TRANSPORTS's list (comma separated, case and spaces ignored: p2p,
// shm; net is known but has no transport yet; none allows nothing), less
// what FERRY_P2P_DISABLE and FERRY_SHM_DISABLE turn off. A list that names
// no known transport (empty, or only unknown names) allows all of them.
// Unknown names are added to unknown, for the caller to report.
AllowedTransports allowed_transports(const std::string& list, bool p2p_disable, bool shm_disable,
                                     std::vector<std::string>* unknown);

// How `rank` reaches each rank (itself: p2p), from everyone's identity and
// the topology when there is one (else nullptr):
//  - ranks on other machines, or with another device backend: none;
//  - GPUs whose rank attribute is a communicator rank (a topology file):
//    the search's transport between the two (NET: none);
//  - CUDA with a topology but no ranks in it: the worst transport between
//    the machine's GPUs (which GPU a rank uses is not known at set-up);
//  - otherwise p2p, as without a topology.
// Then a p2p that is not allowed becomes shm, and a shm that is not
// allowed none.
std::vector<PeerTransport> plan_peer_transports(int rank, const std::vector<RankIdentity>& ranks,
                                                const SystemGraph* topology, const AllowedTransports& allowed);

class Communicator {
 public:
  // Collective over the bootstrap's ranks.
  static Status create(std::unique_ptr<Bootstrap> bootstrap, std::unique_ptr<Communicator>* out);
  ~Communicator();

  int rank() const { return bootstrap_->rank(); }
  int size() const { return bootstrap_->size(); }
  Bootstrap& bootstrap() { return *bootstrap_; }
  PeerMemory& peer_memory() { return peer_memory_; }
  // True when every peer's device memory can be mapped here (one machine,
  // same device backend): the precondition of the direct algorithms.
  bool all_peers_mapped() const { return all_peers_mapped_; }
  // What the topology planned for peer (plan_peer_transports); the
  // collectives take p2p only when every peer has it, else shm when every
  // peer has p2p or shm.
  PeerTransport transport_to(int peer) const { return transports_[peer]; }
  // Host shared memory with every peer, where peer device memory cannot be
  // mapped but all ranks share one machine; nullptr otherwise.
  SharedSegments* shm() { return shm_.get(); }
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

  // Stream `index` on device of backend, created on first use and kept
  // (urgent: gpu::Backend::stream_create_urgent, when it is created).
  Status stream_for(gpu::Backend* backend, int device, gpu::Stream* stream, int index = 0, bool urgent = false);
  // Event `index` on device of backend, created on first use and kept.
  Status event_for(gpu::Backend* backend, int device, gpu::Event* event, int index);
  // Device scratch of at least bytes on device, kept between calls (grown
  // when a call needs more): no allocation per call on the steady path.
  Status scratch_for(gpu::Backend* backend, int device, std::size_t bytes, void** scratch);
  // The engine worker on device of backend, created on first use and kept;
  // nullptr when there is none (FERRY_WORKER=0, the backend has none, or
  // ranks_take_turns_on_a_gpu).
  Worker* worker_for(gpu::Backend* backend, int device);

  // The LL protocol's receive buffers (worker.h), one per rank, on the
  // device of this rank's first LL call; collective when it makes them.
  struct LlChannel {
    gpu::Backend* backend = nullptr;
    int device = -1;
    void* buffers[kMaxDirectRanks] = {};  // every rank's, mapped here
    std::uint64_t calls = 0;              // LL calls so far: the same on every rank
  };
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
    void* buffers[kMaxDirectRanks] = {};  // every rank's, mapped here
    std::int32_t nsenders[kMaxDirectRanks] = {};
    std::int32_t fifo_at[kMaxDirectRanks] = {};
    std::int32_t own_fifo[kMaxDirectRanks] = {};
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
  // once it reduced a chunk this rank pushed (so the slot may be refilled).
  // Two slots per peer follow.
  struct CopyPushSlots {
    gpu::Backend* backend = nullptr;
    int device = -1;
    std::size_t slot_bytes = 0;
    void* buffers[kMaxDirectRanks] = {};  // every rank's, mapped here
    std::uint32_t sequence = 0;           // chunks so far: the same on every rank
    // A call failed (the ranks' flags may be out of step): no later call
    // uses the slots.
    bool broken = false;
  };
  // A whole large page, so the slots start on one (map_on_every_rank).
  static constexpr std::size_t kCopyPushControlBytes = std::size_t{2} << 20;
  static std::uint32_t* copy_push_arrived(void* buffer, int sender) {
    return static_cast<std::uint32_t*>(buffer) + sender;
  }
  static std::uint32_t* copy_push_consumed(void* buffer, int receiver) {
    return static_cast<std::uint32_t*>(buffer) + kMaxDirectRanks + receiver;
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
  explicit Communicator(std::unique_ptr<Bootstrap> bootstrap) : bootstrap_(std::move(bootstrap)) {}

  // Collective: a buffer of bytes on device of this rank (its first zeroed
  // bytes zeroed; the size rounded up to whole 2 MiB pages), every rank's
  // mapped here into everyone (pinned). When
  // any rank failed, or passed ready_here false, kUnavailable on every rank
  // and nothing of this rank's kept.
  Status map_on_every_rank(gpu::Backend* backend, int device, std::size_t bytes, std::size_t zeroed,
                           bool ready_here, void** own, void* (&everyone)[kMaxDirectRanks]);

  std::unique_ptr<Bootstrap> bootstrap_;
  bool all_peers_mapped_ = false;
  bool no_worker_ = false;       // ranks_take_turns_on_a_gpu
  bool on_one_gpu_ = false;      // ranks_share_one_gpu
  std::vector<int> gpu_leader_;  // gpu_leaders, or empty: each rank does its own device work
  std::vector<PeerTransport> transports_;
  PeerMemory peer_memory_;
  std::unique_ptr<SharedSegments> shm_;
  struct StreamKey {
    gpu::Backend* backend;
    int device;
    int index;
    bool operator<(const StreamKey& o) const {
      return backend != o.backend ? backend < o.backend : device != o.device ? device < o.device : index < o.index;
    }
  };
  // The progress thread of nonblocking allreduces looks up streams and
  // events while the application's thread may add others.
  std::mutex handles_mutex_;
  std::map<StreamKey, gpu::Stream> streams_;
  std::map<StreamKey, gpu::Event> events_;
  struct Scratch {
    void* buffer;
    std::size_t bytes;
  };
  std::map<std::pair<gpu::Backend*, int>, Scratch> scratch_;
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
};

}  // namespace ferry
