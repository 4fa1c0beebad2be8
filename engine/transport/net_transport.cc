#include "engine/transport/net_transport.h"

#include <sched.h>

#include <algorithm>
#include <atomic>

#include "engine/bootstrap/bootstrap.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/transport/socket_network.h"
#ifdef FERRY_HAVE_IBVERBS
#include "engine/topology/local_topology.h"
#include "engine/transport/ib_network.h"
#endif

namespace ferry {
namespace {

std::atomic<std::uint64_t> g_sent_bytes{0};
std::atomic<std::uint64_t> g_received_bytes{0};
std::atomic<std::uint64_t> g_straight_device_messages{0};

}  // namespace

NetTraffic net_traffic() { return {g_sent_bytes.load(), g_received_bytes.load(), g_straight_device_messages.load()}; }

// One chunk of a message in flight, in its message's window.
struct NetTransport::Chunk {
  PinnedChunk pinned{nullptr, nullptr};  // staging of device memory
  gpu::Event event = nullptr;            // its copy to or from the device
  NetRequest request;
};

struct NetTransport::Message {
  bool send;
  int peer;
  int tag;
  char* local;
  std::size_t bytes;
  gpu::Backend* backend;  // device memory of backend's device; nullptr: host memory
  int device;
  Completion* completion;
  std::size_t chunks;
  // Chunks in order: staged (copied out of the device: device sends),
  // posted to the network, landed (arrived and copying in: device
  // receives) and finished. At most chunks_in_flight between posted (or
  // staged) and finished.
  std::size_t staged = 0, posted = 0, landed = 0, finished = 0;
  std::vector<Chunk> window;
  // Device memory the provider takes straight (remember_device_memory):
  // moved as host memory is, forgotten when the message ends.
  bool straight_device = false;
  // Handed to the network whole (post_send_now, hand_over): not held back
  // by earlier messages of its queue.
  bool handed_over = false;

  Chunk& slot(std::size_t chunk) { return window[chunk % window.size()]; }
  std::size_t offset(std::size_t chunk, std::size_t chunk_bytes) const { return chunk * chunk_bytes; }
  std::size_t length(std::size_t chunk, std::size_t chunk_bytes) const {
    return std::min(chunk_bytes, bytes - chunk * chunk_bytes);
  }
  bool same_queue(const Message& other) const {
    return send == other.send && peer == other.peer && tag == other.tag;
  }
};

NetTransport::NetTransport(std::size_t chunk_bytes, int chunks_in_flight)
    : chunk_bytes_(std::max<std::size_t>(chunk_bytes, 4096)),
      chunks_in_flight_(std::max(chunks_in_flight, 1)),
      idle_chunk_bytes_((4 * static_cast<std::size_t>(chunks_in_flight_) + 16) * chunk_bytes_) {}

NetTransport::~NetTransport() {
  abandon(Status::kUnavailable);
  for (const CopyStream& s : streams_) {
    FERRY_LOG_IF_FAILED(s.backend->stream_synchronize(s.stream));
    FERRY_LOG_IF_FAILED(s.backend->stream_destroy(s.stream));
  }
  for (auto& [backend, event] : idle_events_) FERRY_LOG_IF_FAILED(backend->event_destroy(event));
  for (const PinnedChunk& c : idle_chunks_) {
    if (provider_) provider_->forget_memory(c.host, chunk_bytes_);
    FERRY_LOG_IF_FAILED(c.backend->pinned_free(c.host));
  }
  // The network may still hold abandoned chunks; closing it (below) ends that.
  provider_.reset();
  for (const PinnedChunk& c : lost_chunks_) FERRY_LOG_IF_FAILED(c.backend->pinned_free(c.host));
}

bool NetTransport::can_connect(const PeerView& view) const { return !same_machine(view.self, view.peer); }

Status NetTransport::connect(Bootstrap& bootstrap) { return connect(bootstrap, params().net); }

Status connect_ib_network(Bootstrap& bootstrap, const std::string& provider, std::unique_ptr<NetProvider>* out) {
  if (provider != "ib" && provider != "auto") return Status::kUnavailable;
#ifdef FERRY_HAVE_IBVERBS
  IbNetworkOptions options = IbNetworkOptions::from_params();
  options.asked_for = provider == "ib";
  options.nearest = nearest_net_ports_here();
  return make_ib_network(bootstrap, out, options);
#else
  (void)bootstrap, (void)out;
  if (provider == "ib")
    FERRY_WARN(Transport, "FERRY_NET=ib: this build has no ib provider (no infiniband/verbs.h when it was built)");
  return Status::kUnavailable;
#endif
}

Status NetTransport::connect(Bootstrap& bootstrap, const std::string& provider) {
  if (provider == "socket") return make_socket_network(bootstrap, &provider_);
  if (provider == "ib" || provider == "auto") {
    const Status status = connect_ib_network(bootstrap, provider, &provider_);
    if (ok(status) || provider == "ib") return status;
  }
  provider_ = bootstrap.open_network();
  if (provider_ || provider != "auto") return provider_ ? Status::kOk : Status::kUnavailable;
  // The engine without MPI: its own connections.
  return make_socket_network(bootstrap, &provider_);
}

Status NetTransport::post_send(int peer, const void* local, std::size_t bytes, int tag, Completion* completion) {
  return post(true, peer, const_cast<void*>(local), bytes, tag, completion);
}

Status NetTransport::post_recv(int peer, void* local, std::size_t bytes, int tag, Completion* completion) {
  return post(false, peer, local, bytes, tag, completion);
}

Status NetTransport::post_send_now(int peer, const void* local, std::size_t bytes, int tag, Completion* completion,
                                   std::chrono::steady_clock::time_point deadline) {
  const std::size_t chunks = (bytes + chunk_bytes_ - 1) / chunk_bytes_;
  FERRY_CHECK(post(true, peer, const_cast<void*>(local), bytes, tag, completion, std::max<std::size_t>(chunks, 1)));
  return post_all(completion, bytes, deadline);
}

NetTransport::Message* NetTransport::find(const Completion* completion) {
  for (Message& m : messages_)
    if (m.completion == completion) return &m;
  return nullptr;
}

bool NetTransport::any_sent(const Completion* completion) const {
  for (const Message& m : messages_)
    if (m.completion == completion) return m.finished > 0;
  return completion->done;
}

Status NetTransport::hand_over(Completion* completion, std::chrono::steady_clock::time_point deadline) {
  Message* m = find(completion);
  if (!m) return completion->done ? Status::kOk : Status::kInvalidArgument;
  if (m->window.size() < m->chunks) {
    // The window becomes the whole message: the chunks in flight keep their
    // places by index.
    std::vector<Chunk> whole(m->chunks);
    for (std::size_t chunk = m->finished; chunk < std::max(m->posted, m->staged); ++chunk)
      whole[chunk] = std::move(m->slot(chunk));
    m->window = std::move(whole);
  }
  m->handed_over = true;
  return post_all(completion, m->bytes, deadline);
}

Status NetTransport::post_all(Completion* completion, std::size_t bytes,
                              std::chrono::steady_clock::time_point deadline) {
  for (int polls = 0;; ++polls) {
    if (completion->done) return Status::kOk;
    const Message* m = find(completion);
    if (!m || m->posted == m->chunks) return Status::kOk;
    FERRY_CHECK(progress());
    if (polls % 1024 == 1023 && std::chrono::steady_clock::now() > deadline) {
      FERRY_WARN(Transport, "net: a %zu-byte send could not be handed to the network in time (FERRY_HANDSHAKE_TIMEOUT)",
                 bytes);
      abandon(Status::kTimeout);
      return Status::kTimeout;
    }
  }
}

Status NetTransport::post(bool send, int peer, void* local, std::size_t bytes, int tag, Completion* completion,
                          std::size_t window) {
  if (!ok(broken_)) return broken_;
  if (!provider_ || peer < 0 || peer >= provider_->size() || peer == provider_->rank() || tag < 0 ||
      (bytes > 0 && !local))
    return Status::kInvalidArgument;
  const gpu::PointerInfo info = gpu::classify(local);
  gpu::Backend* backend = info.kind == gpu::MemoryKind::kDevice ? gpu::owner_backend(info) : nullptr;
  completion->done = bytes == 0;
  if (bytes == 0) return Status::kOk;
  const bool straight_device = backend && provider_->remember_device_memory(local, bytes);
  messages_.push_back(Message{send, peer, tag, static_cast<char*>(local), bytes, straight_device ? nullptr : backend,
                              info.device, completion, (bytes + chunk_bytes_ - 1) / chunk_bytes_});
  messages_.back().straight_device = straight_device;
  messages_.back().handed_over = window > 0;
  if (straight_device) g_straight_device_messages.fetch_add(1, std::memory_order_relaxed);
  messages_.back().window.resize(window > 0 ? window : static_cast<std::size_t>(chunks_in_flight_));
  return progress();
}

Status NetTransport::test(Completion* completion, bool* done) {
  if (!completion->done) FERRY_CHECK(progress());
  *done = completion->done;
  return Status::kOk;
}

Status NetTransport::wait_all(std::initializer_list<Completion*> completions,
                              std::chrono::steady_clock::time_point deadline) {
  return wait_all(std::vector<Completion*>(completions), deadline);
}

Status NetTransport::wait_all(const std::vector<Completion*>& completions,
                              std::chrono::steady_clock::time_point deadline) {
  for (int polls = 0;; ++polls) {
    bool all_done = true;
    for (const Completion* c : completions) all_done = all_done && c->done;
    if (all_done) return Status::kOk;
    FERRY_CHECK(progress());
    if (polls % 1024 == 1023) {
      if (std::chrono::steady_clock::now() > deadline) {
        FERRY_WARN(Transport, "net: %zu messages did not complete in time (FERRY_HANDSHAKE_TIMEOUT)",
                   messages_.size());
        abandon(Status::kTimeout);
        return Status::kTimeout;
      }
      sched_yield();
    }
  }
}

Status NetTransport::take_chunk(gpu::Backend* backend, Chunk* chunk) {
  for (std::size_t i = 0; i < idle_chunks_.size(); ++i) {
    if (idle_chunks_[i].backend != backend) continue;
    chunk->pinned = idle_chunks_[i];
    idle_chunks_.erase(idle_chunks_.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  }
  if (!chunk->pinned.host) {
    chunk->pinned.backend = backend;
    FERRY_CHECK(backend->pinned_alloc(chunk_bytes_, &chunk->pinned.host));
    if (provider_) provider_->remember_memory(chunk->pinned.host, chunk_bytes_);
  }
  if (!chunk->event) {
    for (std::size_t i = 0; i < idle_events_.size(); ++i) {
      if (idle_events_[i].first != backend) continue;
      chunk->event = idle_events_[i].second;
      idle_events_.erase(idle_events_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    if (!chunk->event) FERRY_CHECK(backend->event_create(&chunk->event));
  }
  return Status::kOk;
}

void NetTransport::return_chunk(Chunk* chunk) {
  // Whole sends (post_send_now) may take many chunks at once: past
  // idle_chunk_bytes_ they go back to the system.
  if (chunk->pinned.host && (idle_chunks_.size() + 1) * chunk_bytes_ > idle_chunk_bytes_) {
    if (provider_) provider_->forget_memory(chunk->pinned.host, chunk_bytes_);
    FERRY_LOG_IF_FAILED(chunk->pinned.backend->pinned_free(chunk->pinned.host));
  } else if (chunk->pinned.host) {
    idle_chunks_.push_back(chunk->pinned);
  }
  if (chunk->event) idle_events_.push_back({chunk->pinned.backend, chunk->event});
  *chunk = Chunk{};
}

Status NetTransport::stream_for(Message& message, gpu::Stream* stream) {
  for (const CopyStream& s : streams_) {
    if (s.backend == message.backend && s.device == message.device) {
      *stream = s.stream;
      return Status::kOk;
    }
  }
  FERRY_CHECK(message.backend->set_device(message.device));
  FERRY_CHECK(message.backend->stream_create(stream));
  streams_.push_back({message.backend, message.device, *stream});
  return Status::kOk;
}

Status NetTransport::progress_send(Message& m, bool may_post, std::size_t room) {
  const std::size_t window = std::min(m.window.size(), room);
  if (m.backend) {
    gpu::Stream stream = nullptr;
    while (m.staged < m.chunks && m.staged - m.finished < window) {
      Chunk& c = m.slot(m.staged);
      FERRY_CHECK(take_chunk(m.backend, &c));
      if (!stream) FERRY_CHECK(stream_for(m, &stream));
      FERRY_CHECK(m.backend->copy_async(c.pinned.host, m.local + m.offset(m.staged, chunk_bytes_),
                                        m.length(m.staged, chunk_bytes_), stream));
      FERRY_CHECK(m.backend->event_record(c.event, stream));
      ++m.staged;
    }
    while (may_post && m.posted < m.staged) {
      Chunk& c = m.slot(m.posted);
      bool copied = false;
      FERRY_CHECK(m.backend->event_done(c.event, &copied));
      if (!copied) break;
      FERRY_CHECK(provider_->post_send(m.peer, m.tag, c.pinned.host, m.length(m.posted, chunk_bytes_), &c.request));
      ++m.posted;
    }
  } else {
    while (may_post && m.posted < m.chunks && m.posted - m.finished < window) {
      Chunk& c = m.slot(m.posted);
      FERRY_CHECK(provider_->post_send(m.peer, m.tag, m.local + m.offset(m.posted, chunk_bytes_),
                                       m.length(m.posted, chunk_bytes_), &c.request));
      ++m.posted;
    }
  }
  while (m.finished < m.posted) {
    Chunk& c = m.slot(m.finished);
    bool sent = false;
    FERRY_CHECK(provider_->test(&c.request, &sent));
    if (!sent) break;
    g_sent_bytes += m.length(m.finished, chunk_bytes_);
    return_chunk(&c);
    ++m.finished;
  }
  return Status::kOk;
}

Status NetTransport::progress_recv(Message& m, bool may_post, std::size_t room) {
  const std::size_t window = std::min(m.window.size(), room);
  while (may_post && m.posted < m.chunks && m.posted - m.finished < window) {
    Chunk& c = m.slot(m.posted);
    char* into = m.local + m.offset(m.posted, chunk_bytes_);
    if (m.backend) {
      FERRY_CHECK(take_chunk(m.backend, &c));
      into = static_cast<char*>(c.pinned.host);
    }
    FERRY_CHECK(provider_->post_recv(m.peer, m.tag, into, m.length(m.posted, chunk_bytes_), &c.request));
    ++m.posted;
  }
  gpu::Stream stream = nullptr;
  while (m.landed < m.posted) {
    Chunk& c = m.slot(m.landed);
    bool arrived = false;
    FERRY_CHECK(provider_->test(&c.request, &arrived));
    if (!arrived) break;
    g_received_bytes += m.length(m.landed, chunk_bytes_);
    if (m.backend) {
      if (!stream) FERRY_CHECK(stream_for(m, &stream));
      FERRY_CHECK(m.backend->copy_async(m.local + m.offset(m.landed, chunk_bytes_), c.pinned.host,
                                        m.length(m.landed, chunk_bytes_), stream));
      FERRY_CHECK(m.backend->event_record(c.event, stream));
    }
    ++m.landed;
  }
  while (m.finished < m.landed) {
    Chunk& c = m.slot(m.finished);
    if (m.backend) {
      bool copied = false;
      FERRY_CHECK(m.backend->event_done(c.event, &copied));
      if (!copied) break;
    }
    return_chunk(&c);
    ++m.finished;
  }
  return Status::kOk;
}

Status NetTransport::progress() {
  if (!ok(broken_)) return broken_;
  // A message posts its chunks only after every earlier message of its
  // queue (direction, peer, tag) has posted all of its own: the network
  // matches them in that order. The chunks in flight of a queue's messages
  // together stay within the window (a chain of many messages holds no
  // more pinned memory than one); a message handed over whole is not held
  // back.
  std::vector<const Message*> unposted;
  std::vector<const Message*> started;
  Status status = Status::kOk;
  for (auto it = messages_.begin(); it != messages_.end() && ok(status);) {
    Message& m = *it;
    bool may_post = true;
    for (const Message* earlier : unposted) may_post = may_post && !m.same_queue(*earlier);
    std::size_t earlier_in_flight = 0;
    for (const Message* earlier : started)
      if (m.same_queue(*earlier)) earlier_in_flight += std::max(earlier->posted, earlier->staged) - earlier->finished;
    const std::size_t room = m.handed_over                          ? m.window.size()
                             : m.window.size() > earlier_in_flight ? m.window.size() - earlier_in_flight
                                                                   : 0;
    status = m.send ? progress_send(m, may_post, room) : progress_recv(m, may_post, room);
    if (m.posted < m.chunks) unposted.push_back(&m);
    if (ok(status) && m.finished == m.chunks) {
      if (m.straight_device) provider_->forget_memory(m.local, m.bytes);
      m.completion->done = true;
      it = messages_.erase(it);
    } else {
      started.push_back(&m);  // still in the list: later messages of its queue count its chunks
      ++it;
    }
  }
  if (!ok(status)) abandon(status);
  return status;
}

void NetTransport::abandon(Status why) {
  for (Message& m : messages_) {
    for (std::size_t chunk = m.finished; chunk < std::max(m.posted, m.staged); ++chunk) {
      Chunk& c = m.slot(chunk);
      if (c.request.handle && provider_) provider_->cancel(&c.request);
      if (c.pinned.host) lost_chunks_.push_back(c.pinned);
      if (c.event) idle_events_.push_back({c.pinned.backend, c.event});
      c = Chunk{};
    }
    if (m.straight_device && provider_) provider_->forget_memory(m.local, m.bytes);
  }
  messages_.clear();
  if (ok(broken_)) broken_ = why;
}

}  // namespace ferry
