#include "mpi_shim/peer_bounce.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "engine/collectives/collectives.h"
#include "engine/common/log.h"
#include "engine/common/params.h"

namespace ferry::shim::peer {

namespace {

struct Pool {
  std::mutex mutex;
  std::vector<std::unique_ptr<Bounce>> bounces;
  std::vector<SendInFlight> in_flight;
  std::unique_ptr<HostBounces> host_bounces;  // made at first use
  // The peers' host bounce buffers this process's receives copied from.
  PeerHostBounces peer_host_bounces;
  // Streams of the sends' copies into bounce buffers and of the receives'
  // copies out of them, by backend and device (-1: a host receive buffer).
  std::mutex streams_mutex;
  std::map<std::pair<gpu::Backend*, int>, gpu::Stream> send_streams, receive_streams;
};

Pool& pool() {
  static auto* p = new Pool;
  return *p;
}

// The stream of this kind for backend and device, made at first use.
gpu::Stream stream_for(std::map<std::pair<gpu::Backend*, int>, gpu::Stream>& streams, gpu::Backend* backend,
                       int device) {
  std::lock_guard<std::mutex> lock(pool().streams_mutex);
  gpu::Stream& stream = streams[{backend, device}];
  if (!stream && (device < 0 || ok(backend->set_device(device))) && !ok(backend->stream_create(&stream)))
    stream = nullptr;
  return stream;
}

void free_bounce(Bounce& bounce) {
  if (bounce.filled) FERRY_LOG_IF_FAILED(bounce.backend->event_destroy(bounce.filled));
  FERRY_LOG_IF_FAILED(bounce.backend->device_free(bounce.ptr));
}

// LockedBounces::reap with the pool's mutex held.
void reap_locked(Pool& p) {
  if (p.in_flight.empty()) return;
  std::vector<MPI_Request> replies;
  replies.reserve(p.in_flight.size());
  for (const SendInFlight& send : p.in_flight) replies.push_back(send.reply);
  std::vector<int> done(replies.size());
  int outcount = 0;
  if (PMPI_Testsome(static_cast<int>(replies.size()), replies.data(), &outcount, done.data(), MPI_STATUSES_IGNORE) !=
          MPI_SUCCESS ||
      outcount == MPI_UNDEFINED)
    return;
  std::vector<bool> finished(replies.size(), false);
  for (int k = 0; k < outcount; ++k) finished[done[k]] = true;
  std::vector<SendInFlight> still;
  for (std::size_t i = 0; i < p.in_flight.size(); ++i) {
    if (finished[i] && p.in_flight[i].host) {
      p.in_flight[i].host->busy = false;
    } else if (finished[i]) {
      Bounce* bounce = p.in_flight[i].bounce;
      bounce->busy = false;
      // Its word was raised past the chunks to come: never used again.
      bounce->retired = bounce->reply == kFailed;
    } else {
      still.push_back(p.in_flight[i]);
    }
  }
  p.in_flight.swap(still);
}

}  // namespace

LockedBounces::LockedBounces() : lock_(pool().mutex) {}

void LockedBounces::reap() { reap_locked(pool()); }

Bounce* LockedBounces::take(gpu::Backend* backend, int device, std::size_t bytes) {
  Pool& p = pool();
  const std::uint64_t limit = static_cast<std::uint64_t>(std::max<std::int64_t>(params().pt2pt_bounce_bytes, 0));
  Bounce* best = nullptr;
  for (const auto& b : p.bounces)
    if (!b->busy && !b->retired && b->backend == backend && b->device == device && b->bytes >= bytes &&
        (!best || b->bytes < best->bytes))
      best = b.get();
  if (!best) {
    const std::size_t rounded = bounce_bytes(bytes);
    std::uint64_t held = 0, idle = 0;
    for (const auto& b : p.bounces) {
      held += b->bytes;
      if (!b->busy) idle += b->bytes;
    }
    // Idle buffers are freed only when that makes room.
    if (held - idle + rounded > limit) {
      FERRY_TRACE(Shim, "no bounce buffer of %zu bytes: %llu in use, FERRY_PT2PT_BOUNCE_BYTES %llu", rounded,
                  static_cast<unsigned long long>(held - idle), static_cast<unsigned long long>(limit));
      return nullptr;
    }
    if (held + rounded > limit) {
      // Largest first.
      std::sort(p.bounces.begin(), p.bounces.end(),
                [](const std::unique_ptr<Bounce>& a, const std::unique_ptr<Bounce>& b) { return a->bytes > b->bytes; });
      for (auto it = p.bounces.begin(); it != p.bounces.end() && held + rounded > limit;) {
        if ((*it)->busy) {
          ++it;
          continue;
        }
        held -= (*it)->bytes;
        FERRY_TRACE(Shim, "bounce buffer of %zu bytes freed to make room for %zu", (*it)->bytes, rounded);
        free_bounce(**it);
        it = p.bounces.erase(it);
      }
    }
    void* ptr = nullptr;
    gpu::Event filled = nullptr;
    if (!ok(backend->set_device(device)) || !ok(backend->device_alloc(kBounceHeader + rounded, &ptr))) return nullptr;
    const std::uint32_t zero = 0;
    if (!ok(backend->copy(ptr, &zero, sizeof(zero))) || !ok(backend->event_create(&filled))) {
      FERRY_LOG_IF_FAILED(backend->device_free(ptr));
      return nullptr;
    }
    FERRY_TRACE(Shim, "bounce buffer of %zu bytes made (%llu held before)", rounded,
                static_cast<unsigned long long>(held));
    p.bounces.push_back(std::make_unique<Bounce>(Bounce{ptr, rounded, backend, device, false}));
    best = p.bounces.back().get();
    best->filled = filled;
  }
  best->busy = true;
  return best;
}

HostBounce* LockedBounces::take_host(std::size_t bytes, std::uint64_t nonce) {
  Pool& p = pool();
  if (!p.host_bounces) p.host_bounces = std::make_unique<HostBounces>(nonce);
  const std::uint64_t limit = static_cast<std::uint64_t>(std::max<std::int64_t>(params().pt2pt_host_bounce_bytes, 0));
  return p.host_bounces->take(bytes, limit);
}

void LockedBounces::keep(const SendInFlight& send) { pool().in_flight.push_back(send); }

Status fill_bounce(Bounce& bounce, const void* data, Envelope* env) {
  gpu::Backend* backend = bounce.backend;
  const std::size_t bytes = env->bytes;
  if (!backend->stream_memory_ops()) {
    FERRY_CHECK(backend->copy(bounce.data(), data, bytes));
    env->first_chunk = 0;
    env->chunk_bytes = bytes;
    return backend->event_record(bounce.filled, nullptr);
  }
  gpu::Stream stream = stream_for(pool().send_streams, backend, bounce.device);
  if (!stream) return Status::kUnavailable;
  const std::int64_t asked = params().pt2pt_chunk_bytes;
  const std::size_t chunk =
      asked > 0 ? std::max<std::size_t>(static_cast<std::size_t>(asked), 4096) : std::max<std::size_t>(bytes, 1);
  env->first_chunk = bounce.chunks + 1;
  env->chunk_bytes = chunk;
  for (std::size_t offset = 0; offset < bytes; offset += chunk) {
    const std::size_t length = std::min(chunk, bytes - offset);
    FERRY_CHECK(backend->copy_async(static_cast<char*>(bounce.data()) + offset, static_cast<const char*>(data) + offset,
                                    length, stream));
    FERRY_CHECK(backend->stream_write_value(stream, bounce.word(), ++bounce.chunks));
  }
  return backend->event_record(bounce.filled, stream);
}

Status copy_out(gpu::Backend* backend, const Envelope& env, void* bounce, void* dst, std::size_t length) {
  // An offered send buffer has no header.
  const char* data = static_cast<const char*>(bounce) + (env.claim_slot >= 0 ? 0 : kBounceHeader);
  if (env.first_chunk == 0) return backend->copy(dst, data, length);
  const gpu::PointerInfo where = gpu::classify(dst);
  gpu::Stream stream =
      stream_for(pool().receive_streams, backend, where.kind == gpu::MemoryKind::kDevice ? where.device : -1);
  if (!stream) return Status::kUnavailable;
  auto* word = static_cast<std::uint32_t*>(bounce);
  std::uint32_t chunk = env.first_chunk;
  for (std::size_t offset = 0; offset < length; offset += env.chunk_bytes, ++chunk) {
    FERRY_CHECK(backend->stream_wait_value(stream, word, chunk));
    FERRY_CHECK(backend->copy_async(static_cast<char*>(dst) + offset, data + offset,
                                    std::min<std::size_t>(env.chunk_bytes, length - offset), stream));
  }
  const Status copied = wait_streams_until(backend, {stream}, handshake_deadline());
  if (copied != Status::kTimeout) return copied;
  FERRY_WARN(Shim, "a %llu-byte message's sender did not fill its bounce buffer within FERRY_HANDSHAKE_TIMEOUT",
             static_cast<unsigned long long>(env.bytes));
  FERRY_LOG_IF_FAILED(backend->write_value_now(word, chunk + (1u << 30)));
  FERRY_LOG_IF_FAILED(backend->stream_synchronize(stream));
  return Status::kTimeout;
}

std::uint64_t host_bounces_nonce() { return pool().host_bounces->nonce(); }

const void* map_host_bounce(const Envelope& env) {
  return pool().peer_host_bounces.map(env.buffer.pid, env.segment_fd, env.claim_nonce, env.buffer.allocation_id,
                                      env.bytes);
}

void drain_bounces() {
  Pool& p = pool();
  // Receives complete before MPI_Finalize in a correct program, so their
  // acknowledgements are here or on the way; a receive never made is
  // given up on after FERRY_HANDSHAKE_TIMEOUT.
  std::lock_guard<std::mutex> lock(p.mutex);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(params().handshake_timeout);
  while (!p.in_flight.empty() && std::chrono::steady_clock::now() < deadline) {
    reap_locked(p);
    if (!p.in_flight.empty()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  for (SendInFlight& send : p.in_flight) {
    PMPI_Cancel(&send.reply);
    PMPI_Request_free(&send.reply);
  }
  if (!p.in_flight.empty())
    FERRY_WARN(Shim, "%zu device messages were never received; their bounce buffers stay mapped", p.in_flight.size());
  p.in_flight.clear();
  for (auto& b : p.bounces)
    if (!b->busy) free_bounce(*b);
  p.bounces.clear();
  p.host_bounces.reset();
}

}  // namespace ferry::shim::peer
