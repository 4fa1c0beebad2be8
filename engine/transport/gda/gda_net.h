// The proxy GDA over the net transport: a GdaExecutor (proxy.h) that
// carries descriptors to ranks on other machines over a NetProvider of its
// own (socket or ib; net.h), and applies those other ranks send here into
// this rank's window memory. One thread (the proxy's) drives both sides, so
// every rank's proxy is also its target-side progress.
//
// Wire, per pair of ranks: a fixed-size request (op, window, offsets,
// bytes, signal) on kRequestTag, its data inside it when it is at most
// kInlineWireBytes (one message for a small put) or else on kDataTag, a
// get's bytes (or a returned value: an element read, a fetching atomic's
// old value) back on kReplyTag, and a cumulative count of the requests a
// target applied: inside each request it sends the origin, or on kAckTag
// where none goes there in the turn. A flagged put (kPutFlagged) is
// encoded into its flagged words here and travels as a plain put. The
// target applies one origin's requests in the order they were posted (data
// before its signal), and acknowledges once its effects are visible there;
// an operation is finished at the origin once its count is acknowledged (a
// get, once its bytes are in its destination too). So a ring's `completed`
// (quiet) means visible at the target. A descriptor for this rank itself
// is applied here at once.
//
// Copies wait for one synchronize a turn of the proxy, not one each: the
// sources of the descriptors started in a turn are copied into a pinned
// staging area and their requests posted together (read_sources), and
// the data and set signals served in a turn are queued through it and
// acknowledged together. An atomic, a get or an accumulate reads the
// window after the copies queued before it.
//
// A request the target refuses (an unknown window, a range past the
// window's bytes) comes back as a refused acknowledgement: the origin's
// proxy fails with kInvalidArgument and says which (FERRY_DEBUG=WARN). A
// peer whose process ended fails the proxy with kPeerEnded.
//
// Window memory is device memory (or host memory) of backend; the target
// writes data and signals there with copies on a stream that never waits
// for the application's kernels (they may be waiting for these very
// signals), and never with a kernel of its own (a kernel could wait for
// SMs that the application's waiting kernels hold). An atomic (a signal
// add, an add, fetch-add, compare-and-swap) reads, updates and writes its
// word (a host atomic where the backend's kernels run on the host): the
// words it updates must have no other writer meanwhile, which is why the
// device API sends even this rank's own signals and atomics through the
// queue on such windows. An accumulate is combined on a host copy of its
// bytes by the combiner the owner sets, then written back.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/gpu/gpu.h"
#include "engine/transport/gda/proxy.h"
#include "engine/transport/net.h"

namespace ferry::gda {

// The net provider's tags of the proxy's messages.
constexpr int kRequestTag = 1;
constexpr int kDataTag = 2;
constexpr int kAckTag = 3;
constexpr int kReplyTag = 4;

// What crosses the wire for one descriptor.
struct GdaWireRequest {
  std::uint64_t offset;
  std::uint64_t bytes;
  std::uint64_t signal_offset;
  std::uint64_t value;
  std::uint8_t op;
  std::uint8_t signal_op;
  std::uint16_t window;
  std::uint32_t reserved;
  std::uint64_t data;          // the request's data itself, where it carries bytes <= kInlineWireBytes
  std::uint64_t acknowledged;  // the sender's acknowledgement of the receiver's requests (as on kAckTag)
};
static_assert(sizeof(GdaWireRequest) == 56, "GdaWireRequest crosses the wire");

// The most data bytes a request carries inside itself.
constexpr std::size_t kInlineWireBytes = sizeof(GdaWireRequest::data);
// Whether a request of op carries `bytes` data bytes inside itself.
bool data_inline(GdaOp op, std::uint64_t bytes);

// An acknowledgement: requests applied so far; kRefusedBit set: the one
// after them was refused.
constexpr std::uint64_t kRefusedBit = std::uint64_t{1} << 63;

class GdaNetExecutor : public GdaExecutor {
 public:
  // net: the group's network, used by the proxy's thread alone from now on.
  GdaNetExecutor(gpu::Backend* backend, std::unique_ptr<NetProvider> net);
  ~GdaNetExecutor() override;

  // This rank's memory of window id: [base, base + bytes). Any thread; a
  // rank registers a window before any peer posts to it.
  void add_window(std::uint16_t id, void* base, std::size_t bytes);

  // Combines an accumulate's origin bytes into a copy of the target's bytes
  // in host memory; code is the descriptor's value (which names the element
  // type and operation to its maker).
  using Combiner = std::function<Status(std::uint64_t code, const void* origin, void* target, std::size_t bytes)>;
  // Where accumulates are combined; before the proxy starts. Without one,
  // an accumulate to this rank is refused.
  void set_combiner(Combiner combiner) { combiner_ = std::move(combiner); }

  Status start(const GdaDescriptor& d, int ring, std::uint64_t ticket) override;
  Status read_sources() override { return flush(); }
  Status progress(const std::function<void(int, std::uint64_t)>& finished) override;
  // An acknowledgement not yet sent.
  bool owes_peers() const override;

  // Requests from other ranks applied here so far; once it reads n, the
  // effects of those n are visible to the reading thread.
  std::uint64_t applied() const { return applied_.load(std::memory_order_acquire); }

  int rank() const { return net_->rank(); }
  int size() const { return net_->size(); }

 private:
  struct Window {
    char* base;
    std::size_t bytes;
  };
  // A send and the memory it reads, kept until the send is done.
  struct Outgoing {
    NetRequest request;
    int peer = -1;
    std::vector<char> bytes;
  };
  // A get's bytes on their way back, then copied to their destination.
  struct Reply {
    NetRequest request;
    std::vector<char> bytes;
    void* destination = nullptr;
    bool host_destination = false;  // the proxy's place for a returned value
    bool done = false;
  };
  // A request to another rank waiting for the next flush(): its header, and
  // its data in host memory or still being copied into the staging area.
  struct Unsent {
    int peer = -1;
    GdaWireRequest request{};
    std::vector<char> data;
    std::size_t staged_at = 0, staged_bytes = 0;
    bool flagged = false;  // staged bytes to encode as flagged words under request.value
  };
  struct Started {
    int ring;
    std::uint64_t ticket;
    std::uint64_t sequence;  // this origin's count of requests to the target
    Reply* reply;            // a get's; null for other operations
  };
  struct Peer {
    // Origin side.
    std::uint64_t sent = 0;   // requests posted to it
    std::uint64_t acked = 0;  // requests it applied
    std::deque<Started> started;
    std::deque<std::unique_ptr<Reply>> replies;  // in the order the gets were posted
    NetRequest ack_receive;
    std::uint64_t ack_in = 0;
    // Target side.
    NetRequest request_receive;
    GdaWireRequest request_in{};
    bool awaiting_data = false;
    NetRequest data_receive;
    std::vector<char> data_in;
    std::uint64_t applied = 0;
    bool refused = false;
    std::uint64_t ack_sent = 0;  // the count the last ack carried
    std::unique_ptr<Outgoing> ack_out;
  };

  // On the proxy's thread: its device, a stream of its own for copies, and
  // the staging area.
  Status bind_thread();
  // A copy that has finished when it returns, after those queued before it.
  Status copy(void* dst, const void* src, std::size_t bytes);
  // Room for bytes in the staging area (flushing first if it is full), or
  // false where it could never hold them.
  Status reserve_staging(std::size_t bytes, std::size_t* at, bool* reserved);
  // A copy from host memory (src may be reused at once) into dst that has
  // finished by the next flush().
  Status queue_copy_from_host(void* dst, const void* src, std::size_t bytes);
  // Waits for the queued copies, posts the requests they staged (in the
  // order started), publishes the requests applied here and frees the
  // staging area.
  Status flush();
  Status wait_queued_copies();
  // Drops the cached words that [at, at + bytes) covers.
  void forget_words(const char* at, std::size_t bytes);
  // The old value of the word of width bytes into *old, and the word
  // updated: op kFetchAdd adds value, kCompareSwap stores value if the word
  // equals compare.
  Status update_word(char* word, GdaOp op, std::uint64_t width, std::uint64_t value, std::uint64_t compare,
                     std::uint64_t* old);
  // An accumulate's data combined into the window's bytes at `at`.
  Status combine(const GdaWireRequest& request, char* at, const char* data);
  // The bytes a put of d carries to its target: in host memory for a
  // request to this rank, or queued into the staging area for another.
  Status stage(const GdaDescriptor& d, std::vector<char>* data);
  Status stage(const GdaDescriptor& d, Unsent* unsent);
  Status post_receives(int peer);
  Status send(int peer, int tag, std::vector<char> bytes);
  // Where request's bytes lie here, or null (logged) when it must be refused.
  char* locate(const GdaWireRequest& request);
  // Target side: applies request (data: its bytes) from peer, or refuses it.
  Status apply(const GdaWireRequest& request, const char* data, bool* refused);
  // What an answered request (a get, or one that returns a value) gives
  // back, into `into` (any memory the backend copies to), or refused.
  // data: a get-accumulate's origin bytes.
  Status answer(const GdaWireRequest& request, const char* data, void* into, bool* refused);
  // Target side: sends that answer back to peer, or refuses the request.
  Status answer_peer(int peer, const GdaWireRequest& request, const char* data, bool* refused);
  // Origin side: copies arrived replies to their destinations.
  Status take_replies(Peer& peer);
  // Both sides of the traffic with peer p.
  Status progress_peer(int p, const std::function<void(int, std::uint64_t)>& finished);
  Status serve(int peer);
  // What this rank acknowledges to peer: the requests applied (their
  // effects visible), with kRefusedBit where the next was refused.
  std::uint64_t acknowledgement(const Peer& peer) const;
  // Origin side: an acknowledgement from peer, on kAckTag or inside a request.
  Status take_acknowledgement(int peer, std::uint64_t count);
  Status acknowledge(int peer);
  bool find_window(std::uint16_t id, Window* out);

  gpu::Backend* backend_;
  int device_ = -1;  // the creating thread's
  gpu::Stream stream_ = nullptr;
  bool bound_ = false;
  // Pinned host memory that copies on stream_ read from or write to, so
  // that many copies wait for one synchronize; null where it could not be
  // had (every copy then waits for itself).
  char* staging_ = nullptr;
  std::size_t staging_used_ = 0;
  bool copies_queued_ = false;
  std::vector<Unsent> unsent_;
  std::uint64_t applied_unpublished_ = 0;  // applied here since the last flush
  // Words in device memory that this turn's atomics updated, as they left
  // them (the copies writing them may still be queued): a later atomic of
  // the turn on the same word reads it here instead of waiting for a copy
  // back. Forgotten at each flush and where a copy of data covers them.
  struct CachedWord {
    char* at;
    std::uint64_t width;
    std::uint64_t value;
  };
  std::vector<CachedWord> cached_words_;
  std::unique_ptr<NetProvider> net_;
  std::vector<Peer> peers_;
  std::deque<std::unique_ptr<Outgoing>> outgoing_;
  std::vector<std::pair<int, std::uint64_t>> finished_here_;  // self-targeted, to report
  bool receives_posted_ = false;
  std::atomic<std::uint64_t> applied_{0};
  Combiner combiner_;
  std::mutex windows_mutex_;
  std::unordered_map<std::uint16_t, Window> windows_;
};

}  // namespace ferry::gda
