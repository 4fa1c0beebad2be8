// The socket provider's message engine (socket_network.h): framing,
// matching by sequence number, unexpected messages, a peer's end, and the
// thread that moves bytes while the engine is elsewhere.
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engine/common/liveness.h"
#include "engine/transport/socket_links.h"

namespace ferry {
namespace {

// Precedes every message on a stream, in host byte order (one architecture
// a job).
struct Header {
  std::int32_t tag;
  std::uint32_t kind;
  std::uint64_t bytes;
  std::uint64_t sequence;  // of the message among its sender's to this (peer, tag)
};
static_assert(sizeof(Header) == 24, "Header is part of the wire format");
constexpr std::uint32_t kData = 0;
constexpr std::uint32_t kGoodbye = 1;  // the sender closes this stream on purpose
// Far above the net transport's chunks; a header past it is corrupt.
constexpr std::uint64_t kMaxMessageBytes = std::uint64_t{1} << 34;
// While the engine's thread has called in this recently it moves the
// streams itself, and the progress thread leaves them to it: two threads
// taking turns on the mutex and on the cores, and messages read before
// their receives are posted (one copy more), slow every transfer. Long
// enough that an engine waiting on its device copies between calls is
// still driving.
constexpr std::chrono::milliseconds kEngineDriving{10};
using Clock = std::chrono::steady_clock;
// A stream reads ahead into a buffer of this size: a small message, its
// header and the next messages come in one recv. A payload with at least
// this much still to come is read straight into its place.
constexpr std::size_t kInboxBytes = 8192;

// What a NetRequest holds here.
struct Op {
  bool send;
  int peer;
  int tag;
  std::uint64_t sequence;
  char* data;
  std::size_t bytes;
  bool done = false;
  Status failed = Status::kOk;
  // Send: its stream, and its header. A send cancelled half written keeps
  // the rest of its payload here and is finished (and freed) by the stream.
  int stream = -1;
  Header header{};
  bool orphan = false;
  std::vector<char> owned;
};

// A message that came before its receive was posted.
struct Parked {
  std::vector<char> data;
  bool complete = false;
  bool abandoned = false;  // its receive was cancelled: dropped once complete
  Op* claimant = nullptr;  // a receive posted while it was still arriving
};

using Key = std::tuple<int, int, std::uint64_t>;  // peer, tag, sequence

struct Stream {
  // Shut down, not closed, when it ends: the descriptor stays this stream's
  // (never reused for another file) while the progress thread may poll it.
  OwnedFd fd;
  bool closed = false;
  bool live() const { return fd.valid() && !closed; }
  bool watched_for_room = false;  // in the progress thread's poll with POLLOUT
  std::deque<Op*> sending;
  std::size_t written = 0;  // of the front: header, then payload
  // The message arriving: its header, then its payload into a receive, a
  // parked buffer, or nowhere (a receive cancelled or refused meanwhile).
  Header header{};
  std::size_t header_got = 0;
  bool in_payload = false;
  Op* into_op = nullptr;
  Parked* into_parked = nullptr;
  Key key{};
  std::size_t got = 0;
  // Where the arriving payload goes: its receive's bytes, its parked
  // buffer, or nowhere (null).
  char* payload_place() const {
    return into_op ? into_op->data : into_parked ? into_parked->data.data() : nullptr;
  }
  // Bytes read ahead and not yet taken: inbox[inbox_at, inbox_end).
  std::vector<char> inbox;
  std::size_t inbox_at = 0, inbox_end = 0;
};

struct Peer {
  std::string address;
  std::vector<Stream> streams;
  bool leaving = false;  // said goodbye on a stream: sends are refused
  bool ended = false;    // every operation with it fails
  std::size_t next_stream = 0;
  std::unordered_map<int, std::uint64_t> sent, received;  // next sequence by tag
};

class SocketNetwork final : public NetProvider {
 public:
  SocketNetwork(int rank, int size, std::vector<SocketPeerLinks> links) : rank_(rank), size_(size) {
    peers_.resize(links.size());
    for (std::size_t p = 0; p < links.size(); ++p) {
      peers_[p].address = links[p].address;
      for (OwnedFd& fd : links[p].streams) {
        peers_[p].streams.emplace_back();
        peers_[p].streams.back().fd = std::move(fd);
      }
    }
    wake_ = OwnedFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (wake_.valid())
      progress_thread_ = std::thread([this] { serve(); });
    else
      FERRY_WARN(Transport, "socket network: eventfd: %s; messages move only while the engine polls",
                 std::strerror(errno));
  }

  ~SocketNetwork() override {
    if (progress_thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        wake();
      }
      stop_.notify_all();
      progress_thread_.join();
    }
    // A goodbye on every stream not in the middle of a message, so the peer
    // tells this orderly end from a crash; best effort, never waited on.
    const Header goodbye{0, kGoodbye, 0, 0};
    for (Peer& peer : peers_) {
      for (Stream& s : peer.streams) {
        if (s.live() && s.written == 0) (void)!send(s.fd.fd(), &goodbye, sizeof(goodbye), MSG_DONTWAIT | MSG_NOSIGNAL);
        for (Op* op : s.sending)
          if (op->orphan) delete op;
      }
    }
  }

  const char* name() const override { return "socket"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status post_send(int peer, int tag, const void* data, std::size_t bytes, NetRequest* request) override {
    if (!valid(peer, tag) || (bytes > 0 && !data)) return Status::kInvalidArgument;
    std::lock_guard<std::mutex> lock(mutex_);
    engine_seen_ = Clock::now();
    Peer& p = peers_[peer];
    if (p.ended || p.leaving) return Status::kPeerEnded;
    auto* op = new Op{true, peer, tag, p.sent[tag]++, static_cast<char*>(const_cast<void*>(data)), bytes};
    op->stream = static_cast<int>(p.next_stream++ % p.streams.size());
    op->header = Header{tag, kData, bytes, op->sequence};
    p.streams[op->stream].sending.push_back(op);
    request->handle = op;
    write_stream(peer, p.streams[op->stream]);
    return Status::kOk;
  }

  Status post_recv(int peer, int tag, void* data, std::size_t bytes, NetRequest* request) override {
    if (!valid(peer, tag) || (bytes > 0 && !data)) return Status::kInvalidArgument;
    std::lock_guard<std::mutex> lock(mutex_);
    engine_seen_ = Clock::now();
    Peer& p = peers_[peer];
    auto* op = new Op{false, peer, tag, p.received[tag]++, static_cast<char*>(data), bytes};
    const Key key{peer, tag, op->sequence};
    auto found = parked_.find(key);
    if (found != parked_.end()) {
      Parked& parked = *found->second;
      if (parked.data.size() != bytes) {
        op->failed = mismatch(peer, tag, parked.data.size(), bytes);
        parked.abandoned = true;
        if (parked.complete) parked_.erase(found);
      } else if (parked.complete) {
        if (bytes) std::memcpy(data, parked.data.data(), bytes);
        op->done = true;
        parked_.erase(found);
      } else {
        parked.claimant = op;
      }
    } else if (p.ended) {
      delete op;
      return Status::kPeerEnded;
    } else {
      posted_[key] = op;
    }
    request->handle = op;
    return Status::kOk;
  }

  Status test(NetRequest* request, bool* done) override {
    auto* op = static_cast<Op*>(request->handle);
    if (!op) return Status::kInvalidArgument;
    std::lock_guard<std::mutex> lock(mutex_);
    engine_seen_ = Clock::now();
    *done = false;
    if (!op->done && ok(op->failed)) FERRY_CHECK(progress());
    if (!ok(op->failed)) return op->failed;
    if (!op->done) {
      const Peer& p = peers_[op->peer];
      return p.ended || (op->send && p.leaving) ? Status::kPeerEnded : Status::kOk;
    }
    *done = true;
    delete op;
    request->handle = nullptr;
    return Status::kOk;
  }

  void cancel(NetRequest* request) override {
    auto* op = static_cast<Op*>(request->handle);
    if (!op) return;
    std::lock_guard<std::mutex> lock(mutex_);
    engine_seen_ = Clock::now();
    request->handle = nullptr;
    if (!op->done && op->send) {
      std::deque<Op*>& queue = peers_[op->peer].streams[op->stream].sending;
      auto at = std::find(queue.begin(), queue.end(), op);
      if (at == queue.begin() && peers_[op->peer].streams[op->stream].written > 0) {
        // Half on the wire: the stream sends the rest from a copy, so its
        // framing holds.
        op->owned.assign(op->data, op->data + op->bytes);
        op->data = op->owned.data();
        op->orphan = true;
        return;
      }
      if (at != queue.end()) queue.erase(at);
    } else if (!op->done) {
      posted_.erase(Key{op->peer, op->tag, op->sequence});
      auto parked = parked_.find(Key{op->peer, op->tag, op->sequence});
      if (parked != parked_.end() && parked->second->claimant == op) {
        parked->second->claimant = nullptr;
        parked->second->abandoned = true;
      }
      for (Stream& s : peers_[op->peer].streams)
        if (s.into_op == op) s.into_op = nullptr;
    }
    delete op;
  }

 private:
  bool valid(int peer, int tag) const { return peer >= 0 && peer < size_ && peer != rank_ && tag >= 0; }

  Status mismatch(int peer, int tag, std::size_t sent, std::size_t posted) {
    FERRY_WARN(Transport, "socket network: rank %d sent %zu bytes on tag %d, its receive at rank %d takes %zu", peer,
               sent, tag, rank_, posted);
    return Status::kInvalidArgument;
  }

  // Moves every stream as far as it goes without blocking (the caller's
  // thread, under mutex_: what the progress thread has not yet moved).
  Status progress() {
    polled_.clear();
    where_.clear();
    watch_streams(&polled_, &where_, false);
    if (polled_.empty()) return Status::kOk;
    const int ready = poll(polled_.data(), polled_.size(), 0);
    if (ready < 0 && errno != EINTR) {
      FERRY_WARN(Transport, "socket network: poll: %s", std::strerror(errno));
      return Status::kSystemError;
    }
    if (ready > 0) serve_events(polled_, where_);
    return Status::kOk;
  }

  // Every live stream: POLLIN, and POLLOUT where it has sends waiting.
  // for_thread: marks which streams the progress thread's poll watches for
  // room.
  void watch_streams(std::vector<pollfd>* polled, std::vector<std::pair<int, Stream*>>* where, bool for_thread) {
    for (int p = 0; p < size_; ++p)
      for (Stream& s : peers_[p].streams) {
        if (for_thread) s.watched_for_room = !s.sending.empty();
        if (!s.live()) continue;
        polled->push_back({s.fd.fd(), static_cast<short>(POLLIN | (s.sending.empty() ? 0 : POLLOUT)), 0});
        where->push_back({p, &s});
      }
  }

  // The streams' events: polled's first where.size() entries.
  void serve_events(const std::vector<pollfd>& polled, const std::vector<std::pair<int, Stream*>>& where) {
    for (std::size_t i = 0; i < where.size(); ++i) {
      const short events = polled[i].revents;
      auto [peer, stream] = where[i];
      // The caller may have ended the stream while the thread polled.
      if (!events || !stream->live()) continue;
      if (events & POLLOUT) write_stream(peer, *stream);
      if (stream->live() && (events & (POLLIN | POLLHUP | POLLERR))) read_stream(peer, *stream);
    }
  }

  // The progress thread: while the engine's thread has not called in for
  // kEngineDriving, sleeps in poll on every stream and on wake_, and moves
  // what arrives or finds room, so messages go on while the engine's thread
  // is elsewhere (computing, or blocked in the real MPI).
  void serve() {
    pthread_setname_np(pthread_self(), "ferry-socket");
    std::vector<pollfd> polled;
    std::vector<std::pair<int, Stream*>> where;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      const Clock::duration since_engine = Clock::now() - engine_seen_;
      if (since_engine < kEngineDriving) {
        stop_.wait_for(lock, kEngineDriving - since_engine);
        continue;
      }
      polled.clear();
      where.clear();
      watch_streams(&polled, &where, true);
      polled.push_back({wake_.fd(), POLLIN, 0});
      wake_pending_ = false;
      lock.unlock();
      const int ready = poll(polled.data(), polled.size(), -1);
      const int error = errno;
      lock.lock();
      if (ready < 0) {
        if (error == EINTR) continue;
        FERRY_WARN(Transport, "socket network: poll: %s; messages move only while the engine polls",
                   std::strerror(error));
        return;
      }
      if (polled.back().revents) {
        std::uint64_t count = 0;
        (void)!read(wake_.fd(), &count, sizeof(count));
      }
      if (Clock::now() - engine_seen_ < kEngineDriving) continue;  // the engine's thread is back
      serve_events(polled, where);
    }
  }

  // Has the progress thread poll again (under mutex_).
  void wake() {
    if (wake_pending_ || !wake_.valid()) return;
    wake_pending_ = true;
    const std::uint64_t one = 1;
    (void)!write(wake_.fd(), &one, sizeof(one));
  }

  // A send that does not fit the socket's buffer is finished later: by the
  // progress thread, which this wakes where its poll does not wait for room.
  void write_stream(int peer, Stream& s) {
    write_what_fits(peer, s);
    if (!s.sending.empty() && s.live() && !s.watched_for_room) wake();
  }

  void write_what_fits(int peer, Stream& s) {
    while (!s.sending.empty() && s.live()) {
      Op* op = s.sending.front();
      const std::size_t head = sizeof(Header), total = head + op->bytes;
      iovec parts[2];
      int count = 0;
      if (s.written < head)
        parts[count++] = {reinterpret_cast<char*>(&op->header) + s.written, head - s.written};
      const std::size_t from = s.written < head ? 0 : s.written - head;
      if (from < op->bytes) parts[count++] = {op->data + from, op->bytes - from};
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = static_cast<std::size_t>(count);
      const ssize_t sent = sendmsg(s.fd.fd(), &message, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) lost(peer, std::strerror(errno));
        return;
      }
      s.written += static_cast<std::size_t>(sent);
      if (s.written < total) return;  // the socket's buffer is full
      s.sending.pop_front();
      s.written = 0;
      if (op->orphan)
        delete op;
      else
        op->done = true;
    }
  }

  // Reads what the stream has, a buffer at a time, and takes the messages
  // in it; stops at the first short read (the stream had no more then;
  // poll says when it has).
  void read_stream(int peer, Stream& s) {
    if (s.inbox.empty()) s.inbox.resize(kInboxBytes);
    while (s.live()) {
      if (s.inbox_at < s.inbox_end) {
        take_inbox(peer, s);
        continue;
      }
      char* into = s.inbox.data();
      std::size_t want = s.inbox.size();
      const bool straight = s.in_payload && s.payload_place() && s.header.bytes - s.got >= kInboxBytes;
      if (straight) {
        into = s.payload_place() + s.got;
        want = s.header.bytes - s.got;
      }
      const ssize_t got = recv(s.fd.fd(), into, want, MSG_DONTWAIT);
      if (got == 0) return lost(peer, "the connection was closed");
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) lost(peer, std::strerror(errno));
        return;
      }
      const auto read = static_cast<std::size_t>(got);
      if (straight) {
        s.got += read;
        if (s.got == s.header.bytes) end_message(s);
      } else {
        s.inbox_at = 0;
        s.inbox_end = read;
        take_inbox(peer, s);
      }
      if (read < want) return;
    }
  }

  // Takes headers and payloads out of the stream's inbox until it is empty
  // or the stream ends.
  void take_inbox(int peer, Stream& s) {
    while (s.inbox_at < s.inbox_end && s.live()) {
      const char* from = s.inbox.data() + s.inbox_at;
      const std::size_t have = s.inbox_end - s.inbox_at;
      if (!s.in_payload) {
        const std::size_t n = std::min(have, sizeof(Header) - s.header_got);
        std::memcpy(reinterpret_cast<char*>(&s.header) + s.header_got, from, n);
        s.inbox_at += n;
        s.header_got += n;
        if (s.header_got < sizeof(Header)) return;
        s.header_got = 0;
        if (s.header.kind == kGoodbye) return goodbye(peer, s);
        if (s.header.kind != kData || s.header.tag < 0 || s.header.bytes > kMaxMessageBytes)
          return lost(peer, "a malformed message header");
        begin_message(peer, s);
      } else {
        // Nowhere where a receive was cancelled or refused meanwhile.
        const std::size_t n = std::min<std::size_t>(have, s.header.bytes - s.got);
        if (char* to = s.payload_place(); to && n) std::memcpy(to + s.got, from, n);
        s.inbox_at += n;
        s.got += n;
      }
      if (s.got == s.header.bytes) end_message(s);
    }
  }

  void begin_message(int peer, Stream& s) {
    s.in_payload = true;
    s.got = 0;
    s.key = Key{peer, s.header.tag, s.header.sequence};
    auto posted = posted_.find(s.key);
    if (posted == posted_.end()) {
      auto parked = std::make_unique<Parked>();
      parked->data.resize(s.header.bytes);
      s.into_parked = parked.get();
      parked_[s.key] = std::move(parked);
      return;
    }
    Op* op = posted->second;
    posted_.erase(posted);
    if (op->bytes == s.header.bytes)
      s.into_op = op;
    else
      op->failed = mismatch(peer, s.header.tag, s.header.bytes, op->bytes);
  }

  void end_message(Stream& s) {
    s.in_payload = false;
    if (s.into_op) s.into_op->done = true;
    if (Parked* parked = s.into_parked) {
      parked->complete = true;
      if (Op* op = parked->claimant) {
        if (!parked->data.empty()) std::memcpy(op->data, parked->data.data(), parked->data.size());
        op->done = true;
      }
      if (parked->claimant || parked->abandoned) parked_.erase(s.key);
    }
    s.into_op = nullptr;
    s.into_parked = nullptr;
  }

  // The peer closed this stream on purpose; it has ended once all are.
  void goodbye(int peer, Stream& s) {
    Peer& p = peers_[peer];
    p.leaving = true;
    close_stream(s);
    for (const Stream& other : p.streams)
      if (other.live()) return;
    FERRY_TRACE(Transport, "socket network: rank %d (%s) closed its streams", peer, p.address.c_str());
    p.ended = true;
  }

  // A stream broke without a goodbye: the peer's process has ended (or its
  // network has gone), and nothing more will come from it.
  void lost(int peer, const char* why) {
    Peer& p = peers_[peer];
    if (p.ended) return;
    FERRY_WARN(Transport, "socket network: rank %d lost rank %d at %s: %s; every operation with it fails", rank_, peer,
               p.address.c_str(), why);
    p.ended = true;
    // For the error of whichever call finds it (the progress thread may be
    // the first to see it).
    note_lost_peer(peer, size_);
    for (Stream& s : p.streams) close_stream(s);
  }

  void close_stream(Stream& s) {
    if (s.live()) shutdown(s.fd.fd(), SHUT_RDWR);
    s.closed = true;
    for (Op* op : s.sending)
      if (op->orphan) delete op;
    s.sending.clear();
    s.written = 0;
    if (s.in_payload && s.into_parked) parked_.erase(s.key);
    s.in_payload = false;
    s.inbox_at = s.inbox_end = 0;
    s.into_op = nullptr;
    s.into_parked = nullptr;
  }

  int rank_;
  int size_;
  // Guards everything below: the engine's thread and the progress thread.
  std::mutex mutex_;
  std::vector<Peer> peers_;
  std::map<Key, Op*> posted_;                      // receives no message has reached yet
  std::map<Key, std::unique_ptr<Parked>> parked_;  // messages no receive has reached yet
  std::vector<pollfd> polled_;  // progress()'s, on the engine's thread
  std::vector<std::pair<int, Stream*>> where_;
  OwnedFd wake_;  // eventfd: the progress thread polls again
  bool wake_pending_ = false;
  bool stopping_ = false;
  std::condition_variable stop_;  // the progress thread's sleep ends early
  Clock::time_point engine_seen_{};  // the engine thread's last call
  std::thread progress_thread_;
};

}  // namespace

std::unique_ptr<NetProvider> make_socket_engine(int rank, int size, std::vector<SocketPeerLinks> peers) {
  return std::make_unique<SocketNetwork>(rank, size, std::move(peers));
}

}  // namespace ferry
