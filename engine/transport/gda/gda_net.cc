#include "engine/transport/gda/gda_net.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "engine/common/liveness.h"
#include "engine/common/log.h"

namespace ferry::gda {
namespace {

// The pinned staging area's size; a request's bytes beyond it are copied
// on their own.
constexpr std::size_t kStagingBytes = std::size_t{4} << 20;
constexpr std::size_t kStagingAlign = 16;

bool accumulates(GdaOp op) { return op == GdaOp::kAccumulate || op == GdaOp::kGetAccumulate; }
// Puts whose bytes the descriptor itself carries.
bool puts_inline(GdaOp op) { return op == GdaOp::kPutInline || op == GdaOp::kPutInlineSignal; }
bool moves_data(GdaOp op) {
  return op == GdaOp::kPut || op == GdaOp::kPutSignal || op == GdaOp::kPutFlagged || puts_inline(op) ||
         accumulates(op);
}
bool sets_signal(GdaOp op) {
  return op == GdaOp::kPutSignal || op == GdaOp::kPutInlineSignal || op == GdaOp::kSignal;
}
bool atomic_at_offset(GdaOp op) {
  return op == GdaOp::kAtomicAdd || op == GdaOp::kFetchAdd || op == GdaOp::kCompareSwap;
}
bool touches_word(GdaOp op) { return sets_signal(op) || atomic_at_offset(op); }
bool reads_range(GdaOp op) { return op == GdaOp::kGet || op == GdaOp::kGetValue || op == GdaOp::kGetAccumulate; }
bool covers_range(GdaOp op) { return moves_data(op) || reads_range(op); }
// Whether the target sends bytes back (a get's, or a returned value).
bool answered(GdaOp op) { return op == GdaOp::kGet || op == GdaOp::kGetAccumulate || returns_value(op); }
// The width of the word an atomic updates.
std::uint64_t word_bytes(const GdaWireRequest& request) {
  return static_cast<GdaOp>(request.op) == GdaOp::kCompareSwap ? request.bytes : sizeof(std::uint64_t);
}
// The bytes the target sends back for a request of op.
std::uint64_t answer_bytes(GdaOp op, std::uint64_t bytes) {
  return reads_range(op) ? bytes : sizeof(std::uint64_t);
}

// An atomic update of the word of `width` bytes at `at` in host memory:
// op kFetchAdd adds value, kCompareSwap stores value if the word equals
// compare; the old value into *old.
template <typename Word>
void update_host_word(void* at, GdaOp op, std::uint64_t value, std::uint64_t compare, std::uint64_t* old) {
  auto* word = static_cast<Word*>(at);
  Word before = static_cast<Word>(compare);
  if (op == GdaOp::kFetchAdd)
    before = __atomic_fetch_add(word, static_cast<Word>(value), __ATOMIC_ACQ_REL);
  else
    __atomic_compare_exchange_n(word, &before, static_cast<Word>(value), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  *old = before;
}

// The bytes that flagged_words makes of `bytes` data bytes.
std::size_t flagged_bytes(std::size_t bytes) { return 8 * ((bytes + 3) / 4); }

// A flagged message's words (ferry::device::ll): each 4 data bytes, zero
// padded past the end, under the flag, little-endian as the GPU stores them.
std::vector<char> flagged_words(const char* data, std::size_t bytes, std::uint32_t flag) {
  const std::size_t words = (bytes + 3) / 4;
  std::vector<char> out(flagged_bytes(bytes));
  for (std::size_t i = 0; i < words; ++i) {
    std::uint32_t word[2] = {0, flag};
    std::memcpy(&word[0], data + 4 * i, std::min<std::size_t>(4, bytes - 4 * i));
    std::memcpy(out.data() + 8 * i, word, 8);
  }
  return out;
}

// offset + bytes within limit, without overflow.
bool within(std::uint64_t offset, std::uint64_t bytes, std::size_t limit) {
  return offset <= limit && bytes <= limit - offset;
}

}  // namespace

bool data_inline(GdaOp op, std::uint64_t bytes) {
  return moves_data(op) && bytes != 0 && bytes <= kInlineWireBytes;
}

GdaNetExecutor::GdaNetExecutor(gpu::Backend* backend, std::unique_ptr<NetProvider> net)
    : backend_(backend), net_(std::move(net)), peers_(net_->size()) {
  if (!backend_->chosen_device(&device_)) device_ = -1;
}

Status GdaNetExecutor::bind_thread() {
  if (bound_) return Status::kOk;
  if (device_ >= 0) FERRY_CHECK(backend_->set_device(device_));
  FERRY_CHECK(backend_->stream_create_independent(&stream_));
  void* staging = nullptr;
  if (ok(backend_->pinned_alloc(kStagingBytes, &staging)))
    staging_ = static_cast<char*>(staging);
  else
    FERRY_INFO(Transport, "gda: no pinned staging area; the proxy's copies wait one at a time");
  bound_ = true;
  return Status::kOk;
}

Status GdaNetExecutor::copy(void* dst, const void* src, std::size_t bytes) {
  return backend_->copy_and_wait(dst, src, bytes, stream_);
}

Status GdaNetExecutor::reserve_staging(std::size_t bytes, std::size_t* at, bool* reserved) {
  *reserved = false;
  const std::size_t rounded = (bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
  if (!staging_ || rounded > kStagingBytes) return Status::kOk;
  if (staging_used_ + rounded > kStagingBytes) FERRY_CHECK(flush());
  *at = staging_used_;
  staging_used_ += rounded;
  *reserved = true;
  return Status::kOk;
}

Status GdaNetExecutor::queue_copy_from_host(void* dst, const void* src, std::size_t bytes) {
  std::size_t at = 0;
  bool reserved = false;
  FERRY_CHECK(reserve_staging(bytes, &at, &reserved));
  if (!reserved) return copy(dst, src, bytes);
  std::memcpy(staging_ + at, src, bytes);
  FERRY_CHECK(backend_->copy_async(dst, staging_ + at, bytes, stream_));
  copies_queued_ = true;
  return Status::kOk;
}

Status GdaNetExecutor::wait_queued_copies() {
  if (!copies_queued_) return Status::kOk;
  FERRY_CHECK(backend_->stream_synchronize(stream_));
  copies_queued_ = false;
  return Status::kOk;
}

Status GdaNetExecutor::flush() {
  FERRY_CHECK(wait_queued_copies());
  std::vector<Unsent> unsent;
  unsent.swap(unsent_);
  staging_used_ = 0;
  // The application's kernels may store to the words before the next turn.
  cached_words_.clear();
  for (Unsent& u : unsent) {
    if (u.staged_bytes != 0) {
      const char* staged = staging_ + u.staged_at;
      u.data = u.flagged ? flagged_words(staged, u.staged_bytes, static_cast<std::uint32_t>(u.request.value))
                         : std::vector<char>(staged, staged + u.staged_bytes);
    }
    const bool inside = data_inline(static_cast<GdaOp>(u.request.op), u.data.size());
    if (inside) std::memcpy(&u.request.data, u.data.data(), u.data.size());
    // The copies have finished: what was applied from the peer is visible.
    Peer& peer = peers_[u.peer];
    u.request.acknowledged = acknowledgement(peer);
    peer.ack_sent = u.request.acknowledged;
    std::vector<char> header(sizeof u.request);
    std::memcpy(header.data(), &u.request, sizeof u.request);
    FERRY_CHECK(send(u.peer, kRequestTag, std::move(header)));
    if (!u.data.empty() && !inside) FERRY_CHECK(send(u.peer, kDataTag, std::move(u.data)));
  }
  if (applied_unpublished_ != 0) {
    applied_.fetch_add(applied_unpublished_, std::memory_order_release);
    applied_unpublished_ = 0;
  }
  return Status::kOk;
}

GdaNetExecutor::~GdaNetExecutor() {
  // Receives still posted, sends still in flight: the peers' side is not told.
  for (Peer& peer : peers_) {
    for (NetRequest* request : {&peer.ack_receive, &peer.request_receive, &peer.data_receive})
      if (request->handle) net_->cancel(request);
    if (peer.ack_out && peer.ack_out->request.handle) net_->cancel(&peer.ack_out->request);
    for (auto& reply : peer.replies)
      if (reply->request.handle) net_->cancel(&reply->request);
  }
  for (auto& out : outgoing_)
    if (out->request.handle) net_->cancel(&out->request);
  if (stream_) {
    // Queued copies may still read or write the staging area.
    FERRY_LOG_IF_FAILED(backend_->stream_synchronize(stream_));
    FERRY_LOG_IF_FAILED(backend_->stream_destroy(stream_));
  }
  if (staging_) FERRY_LOG_IF_FAILED(backend_->pinned_free(staging_));
}

void GdaNetExecutor::add_window(std::uint16_t id, void* base, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(windows_mutex_);
  windows_[id] = {static_cast<char*>(base), bytes};
}

bool GdaNetExecutor::find_window(std::uint16_t id, Window* out) {
  std::lock_guard<std::mutex> lock(windows_mutex_);
  const auto it = windows_.find(id);
  if (it == windows_.end()) return false;
  *out = it->second;
  return true;
}

char* GdaNetExecutor::locate(const GdaWireRequest& request) {
  Window window{};
  const auto op = static_cast<GdaOp>(request.op);
  const bool known = find_window(request.window, &window);
  const bool range_fits = !covers_range(op) || within(request.offset, request.bytes, window.bytes);
  const bool value_fits = op != GdaOp::kGetValue || request.bytes <= sizeof(std::uint64_t);
  const std::uint64_t word_offset = atomic_at_offset(op) ? request.offset : request.signal_offset;
  const std::uint64_t width = word_bytes(request);
  const bool width_known = width == 1 || width == 2 || width == 4 || width == 8;
  const bool word_fits =
      !touches_word(op) || (width_known && within(word_offset, width, window.bytes) && word_offset % width == 0);
  const bool combinable = !accumulates(op) || combiner_;
  if (known && range_fits && value_fits && word_fits && combinable) return window.base;
  FERRY_WARN(Transport, "gda: refused a request for window %u, offset %llu, %llu bytes (%s)", request.window,
             static_cast<unsigned long long>(request.offset), static_cast<unsigned long long>(request.bytes),
             !known        ? "no such window here"
             : !combinable ? "no combiner for accumulates here"
                           : "past the window's end, or a word not aligned to its width");
  return nullptr;
}

Status GdaNetExecutor::apply(const GdaWireRequest& request, const char* data, bool* refused) {
  const auto op = static_cast<GdaOp>(request.op);
  char* base = locate(request);
  *refused = base == nullptr;
  if (*refused) return Status::kOk;
  if (accumulates(op)) return combine(request, base + request.offset, data);
  // Data and a set signal are queued behind what is queued already; an
  // atomic's read waits for them.
  if (moves_data(op) && request.bytes != 0) {
    forget_words(base + request.offset, request.bytes);
    FERRY_CHECK(queue_copy_from_host(base + request.offset, data, request.bytes));
  }
  if (touches_word(op)) {
    char* word_at = base + (op == GdaOp::kAtomicAdd ? request.offset : request.signal_offset);
    std::uint64_t old = 0;
    if (op == GdaOp::kAtomicAdd || static_cast<GdaSignalOp>(request.signal_op) == GdaSignalOp::kAdd)
      return update_word(word_at, GdaOp::kFetchAdd, sizeof old, request.value, 0, &old);
    forget_words(word_at, sizeof request.value);
    FERRY_CHECK(queue_copy_from_host(word_at, &request.value, sizeof request.value));
  }
  return Status::kOk;
}

void GdaNetExecutor::forget_words(const char* at, std::size_t bytes) {
  for (std::size_t i = 0; i < cached_words_.size();) {
    const CachedWord& w = cached_words_[i];
    if (w.at < at + bytes && at < w.at + w.width) {
      cached_words_[i] = cached_words_.back();
      cached_words_.pop_back();
    } else {
      ++i;
    }
  }
}

Status GdaNetExecutor::combine(const GdaWireRequest& request, char* at, const char* data) {
  if (request.bytes == 0) return Status::kOk;
  forget_words(at, request.bytes);
  std::vector<char> target(request.bytes);
  FERRY_CHECK(copy(target.data(), at, request.bytes));
  FERRY_CHECK(combiner_(request.value, data, target.data(), request.bytes));
  return copy(at, target.data(), request.bytes);
}

Status GdaNetExecutor::answer(const GdaWireRequest& request, const char* data, void* into, bool* refused) {
  const auto op = static_cast<GdaOp>(request.op);
  char* base = locate(request);
  *refused = base == nullptr;
  if (*refused) return Status::kOk;
  if (reads_range(op)) {
    if (request.bytes != 0) FERRY_CHECK(copy(into, base + request.offset, request.bytes));
    return op == GdaOp::kGetAccumulate ? combine(request, base + request.offset, data) : Status::kOk;
  }
  std::uint64_t old = 0;
  // A compare-and-swap's compare operand travels in signal_offset.
  FERRY_CHECK(update_word(base + request.offset, op, word_bytes(request), request.value, request.signal_offset, &old));
  std::memcpy(into, &old, sizeof old);
  return Status::kOk;
}

Status GdaNetExecutor::answer_peer(int peer, const GdaWireRequest& request, const char* data, bool* refused) {
  std::vector<char> bytes(answer_bytes(static_cast<GdaOp>(request.op), request.bytes));
  FERRY_CHECK(answer(request, data, bytes.data(), refused));
  return *refused ? Status::kOk : send(peer, kReplyTag, std::move(bytes));
}

Status GdaNetExecutor::take_replies(Peer& peer) {
  for (auto& reply : peer.replies) {
    if (reply->done) continue;
    bool done = false;
    FERRY_CHECK(net_->test(&reply->request, &done));
    if (!done) return Status::kOk;  // later replies come after this one
    if (reply->host_destination)
      std::memcpy(reply->destination, reply->bytes.data(), reply->bytes.size());
    else if (!reply->bytes.empty())
      FERRY_CHECK(copy(reply->destination, reply->bytes.data(), reply->bytes.size()));
    reply->done = true;
  }
  return Status::kOk;
}

Status GdaNetExecutor::update_word(char* word, GdaOp op, std::uint64_t width, std::uint64_t value,
                                   std::uint64_t compare, std::uint64_t* old) {
  if (backend_->execution_site() == gpu::ExecutionSite::kHost) {
    // After the copies queued before it, as a copy would be.
    FERRY_CHECK(wait_queued_copies());
    void* at = backend_->host_view(word);
    switch (width) {
      case 1: update_host_word<std::uint8_t>(at, op, value, compare, old); break;
      case 2: update_host_word<std::uint16_t>(at, op, value, compare, old); break;
      case 4: update_host_word<std::uint32_t>(at, op, value, compare, old); break;
      default: update_host_word<std::uint64_t>(at, op, value, compare, old); break;
    }
    return Status::kOk;
  }
  // The word as this turn's atomics left it, or read back (after the
  // copies queued before it).
  CachedWord* cached = nullptr;
  for (CachedWord& w : cached_words_) {
    const bool overlaps = w.at < word + width && word < w.at + w.width;
    if (overlaps && (w.at != word || w.width != width)) {
      cached_words_.clear();  // words of other widths over it: read it back
      cached = nullptr;
      break;
    }
    if (overlaps) cached = &w;
  }
  if (cached) {
    *old = cached->value;
  } else {
    *old = 0;  // little-endian: the word's bytes are its low bytes
    FERRY_CHECK(copy(old, word, width));
  }
  const std::uint64_t mask = width == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * width)) - 1;
  const std::uint64_t updated =
      (op == GdaOp::kFetchAdd ? *old + value : ((*old & mask) == (compare & mask) ? value : *old)) & mask;
  if (!cached) cached = &cached_words_.emplace_back(CachedWord{word, width, *old});
  if (updated == *old) return Status::kOk;
  FERRY_CHECK(queue_copy_from_host(word, &updated, width));
  // Where the copy went out at once, a flush may have forgotten the word.
  for (CachedWord& w : cached_words_)
    if (w.at == word) w.value = updated;
  return Status::kOk;
}

Status GdaNetExecutor::send(int peer, int tag, std::vector<char> bytes) {
  auto out = std::make_unique<Outgoing>();
  out->peer = peer;
  out->bytes = std::move(bytes);
  FERRY_CHECK(net_->post_send(peer, tag, out->bytes.data(), out->bytes.size(), &out->request));
  outgoing_.push_back(std::move(out));
  return Status::kOk;
}

Status GdaNetExecutor::stage(const GdaDescriptor& d, std::vector<char>* data) {
  const auto op = static_cast<GdaOp>(d.op);
  if (puts_inline(op)) {
    if (d.bytes > sizeof d.value) return Status::kInvalidArgument;
    const auto* bits = reinterpret_cast<const char*>(op == GdaOp::kPutInline ? &d.value : &d.source);
    data->assign(bits, bits + d.bytes);
    return Status::kOk;
  }
  // Through host memory: the source may be device memory.
  data->resize(d.bytes);
  if (d.bytes != 0) FERRY_CHECK(copy(data->data(), reinterpret_cast<const void*>(d.source), d.bytes));
  if (op == GdaOp::kPutFlagged) *data = flagged_words(data->data(), data->size(), static_cast<std::uint32_t>(d.value));
  return Status::kOk;
}

Status GdaNetExecutor::stage(const GdaDescriptor& d, Unsent* unsent) {
  const auto op = static_cast<GdaOp>(d.op);
  std::size_t at = 0;
  bool reserved = false;
  if (!puts_inline(op) && d.bytes != 0) FERRY_CHECK(reserve_staging(d.bytes, &at, &reserved));
  if (!reserved) {
    // Inline, empty, or too large for the staging area: read at once.
    FERRY_CHECK(stage(d, &unsent->data));
  } else {
    FERRY_CHECK(backend_->copy_async(staging_ + at, reinterpret_cast<const void*>(d.source), d.bytes, stream_));
    copies_queued_ = true;
    unsent->staged_at = at;
    unsent->staged_bytes = d.bytes;
    unsent->flagged = op == GdaOp::kPutFlagged;
  }
  if (op == GdaOp::kPutFlagged) {
    // The target takes the words as a plain put.
    unsent->request.op = static_cast<std::uint8_t>(GdaOp::kPut);
    unsent->request.bytes = flagged_bytes(d.bytes);
  }
  return Status::kOk;
}

Status GdaNetExecutor::start(const GdaDescriptor& d, int ring, std::uint64_t ticket) {
  FERRY_CHECK(bind_thread());
  if (d.target < 0 || d.target >= size()) return Status::kInvalidArgument;
  const auto op = static_cast<GdaOp>(d.op);
  GdaWireRequest request{d.offset, d.bytes, d.signal_offset, d.value, d.op, d.signal_op, d.window, 0, 0, 0};
  // A get's destination, an accumulate's for the bytes it replaced, or the
  // proxy's place for a returned value.
  void* destination = reinterpret_cast<void*>(op == GdaOp::kGetAccumulate ? d.signal_offset : d.source);
  if (d.target == rank()) {
    std::vector<char> data;
    if (moves_data(op)) {
      FERRY_CHECK(stage(d, &data));
      if (op == GdaOp::kPutFlagged) {
        request.op = static_cast<std::uint8_t>(GdaOp::kPut);
        request.bytes = data.size();
      }
    }
    bool refused = false;
    FERRY_CHECK(answered(op) ? answer(request, data.data(), destination, &refused)
                             : apply(request, data.data(), &refused));
    if (refused) return Status::kInvalidArgument;
    finished_here_.emplace_back(ring, ticket);
    return Status::kOk;
  }
  // Sent at the next flush, once the staged sources are read: a turn's
  // copies wait for one synchronize.
  Unsent unsent;
  unsent.peer = d.target;
  unsent.request = request;
  if (moves_data(op)) FERRY_CHECK(stage(d, &unsent));
  unsent_.push_back(std::move(unsent));
  Peer& peer = peers_[d.target];
  Reply* reply = nullptr;
  if (answered(op)) {
    // Replies from one target come in the order its requests were posted.
    auto awaited = std::make_unique<Reply>();
    awaited->bytes.resize(answer_bytes(op, d.bytes));
    awaited->destination = destination;
    awaited->host_destination = returns_value(op);
    FERRY_CHECK(net_->post_recv(d.target, kReplyTag, awaited->bytes.data(), awaited->bytes.size(), &awaited->request));
    reply = awaited.get();
    peer.replies.push_back(std::move(awaited));
  }
  peer.started.push_back({ring, ticket, ++peer.sent, reply});
  return Status::kOk;
}

Status GdaNetExecutor::post_receives(int p) {
  Peer& peer = peers_[p];
  if (!peer.ack_receive.handle)
    FERRY_CHECK(net_->post_recv(p, kAckTag, &peer.ack_in, sizeof peer.ack_in, &peer.ack_receive));
  if (!peer.request_receive.handle && !peer.awaiting_data)
    FERRY_CHECK(net_->post_recv(p, kRequestTag, &peer.request_in, sizeof peer.request_in, &peer.request_receive));
  return Status::kOk;
}

// Target side for one origin: takes its next request (and data), applies
// it, and acknowledges.
Status GdaNetExecutor::serve(int p) {
  Peer& peer = peers_[p];
  for (;;) {
    bool done = false;
    if (peer.awaiting_data) {
      FERRY_CHECK(net_->test(&peer.data_receive, &done));
      if (!done) return Status::kOk;
      peer.awaiting_data = false;
    } else {
      FERRY_CHECK(net_->test(&peer.request_receive, &done));
      if (!done) return Status::kOk;
      FERRY_CHECK(take_acknowledgement(p, peer.request_in.acknowledged));
      const auto op = static_cast<GdaOp>(peer.request_in.op);
      if (data_inline(op, peer.request_in.bytes)) {
        const auto* bits = reinterpret_cast<const char*>(&peer.request_in.data);
        peer.data_in.assign(bits, bits + peer.request_in.bytes);
      } else if (moves_data(op) && peer.request_in.bytes != 0) {
        peer.data_in.resize(peer.request_in.bytes);
        FERRY_CHECK(net_->post_recv(p, kDataTag, peer.data_in.data(), peer.data_in.size(), &peer.data_receive));
        peer.awaiting_data = true;
        continue;
      }
    }
    // A refusal is final for this origin: it fails, and sends no more.
    bool refused = false;
    if (!peer.refused && answered(static_cast<GdaOp>(peer.request_in.op)))
      FERRY_CHECK(answer_peer(p, peer.request_in, peer.data_in.data(), &refused));
    else if (!peer.refused)
      FERRY_CHECK(apply(peer.request_in, peer.data_in.data(), &refused));
    peer.refused = peer.refused || refused;
    if (!peer.refused) {
      ++peer.applied;
      ++applied_unpublished_;
    }
    FERRY_CHECK(post_receives(p));
  }
}

std::uint64_t GdaNetExecutor::acknowledgement(const Peer& peer) const {
  return peer.applied | (peer.refused ? kRefusedBit : 0);
}

Status GdaNetExecutor::take_acknowledgement(int p, std::uint64_t count) {
  if (count & kRefusedBit) {
    FERRY_WARN(Transport, "gda: rank %d refused request %llu from this rank (see its log)", p,
               static_cast<unsigned long long>((count & ~kRefusedBit) + 1));
    return Status::kInvalidArgument;
  }
  // Counts inside requests and on kAckTag may arrive in either order.
  Peer& peer = peers_[p];
  peer.acked = std::max(peer.acked, count);
  return Status::kOk;
}

// Sends the count applied so far where no request carried it, once the
// previous acknowledgement is out and what was applied is visible (no copy
// is still queued).
Status GdaNetExecutor::acknowledge(int p) {
  Peer& peer = peers_[p];
  if (copies_queued_) return Status::kOk;
  if (peer.ack_out) {
    bool done = false;
    FERRY_CHECK(net_->test(&peer.ack_out->request, &done));
    if (!done) return Status::kOk;
    peer.ack_out.reset();
  }
  const std::uint64_t count = acknowledgement(peer);
  if (count == peer.ack_sent) return Status::kOk;
  peer.ack_out = std::make_unique<Outgoing>();
  peer.ack_out->bytes.resize(sizeof count);
  std::memcpy(peer.ack_out->bytes.data(), &count, sizeof count);
  FERRY_CHECK(net_->post_send(p, kAckTag, peer.ack_out->bytes.data(), sizeof count, &peer.ack_out->request));
  peer.ack_sent = count;
  return Status::kOk;
}

Status GdaNetExecutor::progress(const std::function<void(int, std::uint64_t)>& finished) {
  FERRY_CHECK(bind_thread());
  if (!receives_posted_) {
    for (int p = 0; p < size(); ++p)
      if (p != rank()) FERRY_CHECK(post_receives(p));
    receives_posted_ = true;
  }
  // What was applied here is visible before it is reported. Origins hear
  // of the requests served in the last turn now: inside the requests the
  // proxy sent them since (read_sources), or else on kAckTag.
  FERRY_CHECK(flush());
  for (const auto& [ring, ticket] : finished_here_) finished(ring, ticket);
  finished_here_.clear();
  for (int p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    const Status status = acknowledge(p);
    if (status == Status::kPeerEnded) note_lost_peer(p, size());
    if (!ok(status)) return status;
  }
  // Sends in flight: done ones release their memory (in order: a send's
  // completion does not depend on later ones).
  while (!outgoing_.empty()) {
    bool done = false;
    const Status status = net_->test(&outgoing_.front()->request, &done);
    if (status == Status::kPeerEnded) note_lost_peer(outgoing_.front()->peer, size());
    FERRY_CHECK(status);
    if (!done) break;
    outgoing_.pop_front();
  }
  for (int p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    const Status status = progress_peer(p, finished);
    if (status == Status::kPeerEnded) note_lost_peer(p, size());
    if (!ok(status)) return status;
  }
  // The requests served this turn wait for one synchronize.
  return flush();
}

bool GdaNetExecutor::owes_peers() const {
  for (int p = 0; p < size(); ++p)
    if (p != rank() && acknowledgement(peers_[p]) != peers_[p].ack_sent) return true;
  return false;
}

Status GdaNetExecutor::progress_peer(int p, const std::function<void(int, std::uint64_t)>& finished) {
  Peer& peer = peers_[p];
  FERRY_CHECK(serve(p));
  for (;;) {
    bool done = false;
    FERRY_CHECK(net_->test(&peer.ack_receive, &done));
    if (!done) break;
    FERRY_CHECK(take_acknowledgement(p, peer.ack_in));
    FERRY_CHECK(post_receives(p));
  }
  FERRY_CHECK(take_replies(peer));
  while (!peer.started.empty() && peer.started.front().sequence <= peer.acked) {
    const Started& front = peer.started.front();
    if (front.reply) {
      if (!front.reply->done) break;
      peer.replies.pop_front();  // front.reply is the oldest reply
    }
    finished(front.ring, front.ticket);
    peer.started.pop_front();
  }
  return Status::kOk;
}

}  // namespace ferry::gda
