// The ib provider's insides (ib_network.h), shared by its set-up
// (ib_connect.cc) and its data path (ib_network.cc); nothing else includes
// this.
#pragma once

#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/common/log.h"
#include "engine/transport/ib_endpoint.h"
#include "engine/transport/ib_network.h"
#include "engine/transport/ib_verbs.h"
#include "engine/transport/ib_wire.h"
#include "engine/transport/registration_cache.h"

namespace ferry::ib_detail {

constexpr int kSlotsPerQueuePair = 64;  // control records and data arrivals a queue pair can take unpolled
constexpr int kSendDepth = 128;         // work requests a queue pair has posted at once
constexpr std::size_t kMaxPieceBytes = std::size_t{1} << 30;
constexpr std::size_t kCachedRanges = 1024;

// What a completion's wr_id names: its kind in the top byte.
enum WorkKind : std::uint64_t { kDataWork = 1, kControlWork = 2, kSlotWork = 3 };
inline std::uint64_t work_id(WorkKind kind, std::uint64_t value) { return (std::uint64_t{kind} << 56) | value; }
inline WorkKind kind_of(std::uint64_t wr_id) { return static_cast<WorkKind>(wr_id >> 56); }
inline std::uint64_t value_of(std::uint64_t wr_id) { return wr_id & ((std::uint64_t{1} << 56) - 1); }

// What a NetRequest holds here.
struct Op {
  bool send;
  int peer;
  int tag;
  char* data;
  std::size_t bytes;
  const Registration* registration = nullptr;  // from the cache (remembered memory)
  Registration own{};                          // else registered for this message alone
  char* wire = nullptr;                        // data as the device knows it
  IbControl control{};  // a receive's record; a send's receive's, once it came
  bool posted = false;  // a send's data (or refusal) is with the device
  bool refused = false;
  int queue_pair = -1;
  std::size_t pieces = 0;
  bool done = false;
  bool orphan = false;  // cancelled while the device may still use its memory
  Status failed = Status::kOk;
};

// What waits for room in a queue pair's send queue, in posting order.
struct Outgoing {
  Op* op;              // its data, or (refused) its refusal
  IbControl control;   // without op: a clear-to-send record
};

struct QueuePair {
  ibv_qp* qp = nullptr;
  int peer = -1;
  int in_flight = 0;  // send-queue slots taken
  std::deque<Outgoing> backlog;
};

// The protection domain as the registration cache's registrar: host memory
// by ibv_reg_mr; device memory as a dma-buf (ibv_reg_dmabuf_mr) where its
// backend exports one, else by ibv_reg_mr on the address the device
// reaches it by (the GPU vendor's peer-memory module).
class DomainRegistrar final : public Registrar {
 public:
  DomainRegistrar(const IbVerbs& verbs, ibv_pd* pd) : verbs_(verbs), pd_(pd) {}
  Status register_range(Registration* range) override;
  void deregister_range(const Registration& range) override { verbs_.dereg_mr(static_cast<ibv_mr*>(range.handle)); }

 private:
  const IbVerbs& verbs_;
  ibv_pd* pd_;
};

// Memory the caller keeps (remember_memory, remember_device_memory).
struct Remembered {
  std::uintptr_t base;
  std::size_t bytes;
  bool device;
  const Registration* held;  // device memory: registered while remembered
};

class IbNetwork final : public NetProvider {
 public:
  IbNetwork(int rank, int size, const IbNetworkOptions& options)
      : rank_(rank), size_(size), queue_pairs_(std::clamp(options.queue_pairs, 1, kIbMaxQueuePairs)),
        gid_index_(static_cast<std::uint8_t>(std::clamp(options.gid_index, 0, 255))), options_(options) {}

  ~IbNetwork() override {
    for (QueuePair& q : qps_)
      if (q.qp) verbs_->destroy_qp(q.qp);
    for (Op* op : ops_) unregister(op);
    for (Op* op : ops_) delete op;
    for (const Remembered& r : remembered_)
      if (r.held) cache_->release(r.held);
    cache_.reset();
    if (slots_mr_) verbs_->dereg_mr(slots_mr_);
    std::free(slots_);
    if (cq_) verbs_->destroy_cq(cq_);
    if (pd_) verbs_->dealloc_pd(pd_);
    if (context_) verbs_->close_device(context_);
  }

  // This rank's device, domain, completion queue and queue pairs (in INIT),
  // and its address in *mine (magic left 0 on failure).
  Status open_here(IbEndpoint* mine, std::string* why);
  // Joins every queue pair to its peer's from the exchanged addresses and
  // numbers (qpns: by rank, then peer, then queue pair), and posts the
  // receive slots.
  Status connect(const std::vector<IbEndpoint>& addresses, const std::vector<std::uint32_t>& qpns);
  std::uint32_t qpn(int peer, int q) const { return qps_[index(peer, q)].qp->qp_num; }
  int queue_pairs() const { return queue_pairs_; }

  const char* name() const override { return "ib"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status post_send(int peer, int tag, const void* data, std::size_t bytes, NetRequest* request) override;
  Status post_recv(int peer, int tag, void* data, std::size_t bytes, NetRequest* request) override;
  Status test(NetRequest* request, bool* done) override;
  void cancel(NetRequest* request) override;
  void remember_memory(const void* data, std::size_t bytes) override {
    remembered_.push_back({reinterpret_cast<std::uintptr_t>(data), bytes, false, nullptr});
  }
  bool remember_device_memory(const void* data, std::size_t bytes) override;
  void forget_memory(const void* data, std::size_t bytes) override;

 private:
  std::size_t index(int peer, int q) const { return static_cast<std::size_t>(peer) * queue_pairs_ + q; }
  const Remembered* remembered(const void* data, std::size_t bytes) const {
    const auto base = reinterpret_cast<std::uintptr_t>(data);
    for (const Remembered& r : remembered_)
      if (r.base <= base && bytes <= r.bytes && base - r.base <= r.bytes - bytes) return &r;
    return nullptr;
  }
  std::uint32_t lkey_of(const Op* op) const { return op->registration ? op->registration->lkey : op->own.lkey; }
  std::uint32_t rkey_of(const Op* op) const { return op->registration ? op->registration->rkey : op->own.rkey; }
  bool valid(int peer, int tag) const { return peer >= 0 && peer < size_ && peer != rank_ && tag >= 0; }
  Op* new_op(bool send, int peer, int tag, const void* data, std::size_t bytes, Status* status);
  void unregister(Op* op);
  void release(Op* op);
  // Queues out on queue pair q and posts what fits.
  Status submit(int q, const Outgoing& out);
  Status post_outgoing(int q, const Outgoing& out);
  Status drain(int q);
  Status start_send(Op* op);
  Status progress();
  Status on_completion(const ibv_wc& wc);
  Status on_control(int peer, const IbControl& control);
  Status post_slot(std::size_t slot);
  void end_peer(int peer, int completion_status);

  int rank_, size_, queue_pairs_;
  std::uint8_t gid_index_;
  IbNetworkOptions options_;
  const IbVerbs* verbs_ = nullptr;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::uint8_t port_ = 1;
  std::size_t piece_bytes_ = kMaxPieceBytes;
  std::vector<QueuePair> qps_;  // by peer, then queue pair; none to itself
  std::unordered_map<std::uint32_t, int> peer_of_qpn_;
  char* slots_ = nullptr;
  ibv_mr* slots_mr_ = nullptr;
  std::unique_ptr<DomainRegistrar> registrar_;
  std::unique_ptr<RegistrationCache> cache_;
  std::vector<Remembered> remembered_;
  bool gpudirect_failed_ = false;  // said once
  IbMatcher matcher_;
  std::unordered_set<Op*> ops_;
  std::unordered_map<std::uint32_t, Op*> receives_;  // by id, until their data lands
  std::uint32_t next_receive_ = 1;
  std::vector<std::size_t> next_qp_;  // by peer: data takes its queue pairs in turn
  std::vector<bool> ended_;
};


}  // namespace ferry::ib_detail
