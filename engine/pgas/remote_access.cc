#include "engine/pgas/remote_access.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/common/liveness.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/transport/gda/gda_net.h"
#include "engine/transport/gda/proxy.h"
#include "engine/transport/net_transport.h"
#include "engine/transport/socket_network.h"

namespace ferry {
namespace {

// The proxy's own network: ib where FERRY_NET allows it and every rank
// has a port (as the net transport chooses), else socket. Not the mpi
// provider: it would call the application's MPI from the proxy's thread.
Status make_gda_network(Bootstrap& bootstrap, std::unique_ptr<NetProvider>* out) {
  if (ok(connect_ib_network(bootstrap, params().net, out))) return Status::kOk;
  return make_socket_network(bootstrap, out);
}

std::uint32_t ring_capacity() {
  std::uint32_t slots = 8;
  while (slots < static_cast<std::uint64_t>(params().gda_ring_slots)) slots *= 2;
  return slots;
}

}  // namespace

Status RemoteAccess::create(std::unique_ptr<Bootstrap> bootstrap, gpu::Backend* backend, Memory window,
                            Combiner combiner, std::unique_ptr<RemoteAccess>* out) {
  void* memory = window.base;
  const std::size_t bytes = window.bytes;
  std::unique_ptr<RemoteAccess> access(new RemoteAccess);
  access->backend_ = backend;
  FERRY_CHECK(PeerGroup::create(std::move(bootstrap), &access->group_));
  PeerGroup& group = *access->group_;
  Bootstrap& boot = group.bootstrap();
  const int n = boot.size(), me = boot.rank();

  std::unique_ptr<NetProvider> net;
  FERRY_CHECK(make_gda_network(boot, &net));
  access->executor_ = std::make_unique<gda::GdaNetExecutor>(backend, std::move(net));
  access->proxy_ = std::make_unique<gda::GdaProxy>(backend, access->executor_.get());

  // This rank's sync block, zeroed; the ring the handle points to; the
  // handle's tables (filled below).
  const std::size_t sync_bytes = FERRY_DEVICE_SYNC_WORDS * sizeof(unsigned long long);
  const std::size_t pointer_bytes = n * sizeof(void*), size_bytes = n * sizeof(unsigned long long);
  std::vector<char> tables(2 * pointer_bytes + size_bytes);
  gda::GdaRing ring{};
  // Where kernels run on the host (the emulated device), so do producers.
  const gda::Producers producers =
      backend->execution_site() == gpu::ExecutionSite::kHost ? gda::Producers::kHost : gda::Producers::kDevice;
  std::int32_t ready = ok(backend->device_alloc(sync_bytes, &access->sync_block_)) &&
                       ok(backend->device_alloc(tables.size(), &access->tables_));
  if (ready) {
    const std::vector<unsigned long long> zeros(FERRY_DEVICE_SYNC_WORDS, 0);
    ready = ok(backend->copy(access->sync_block_, zeros.data(), sync_bytes)) &&
            ok(access->proxy_->add_ring(ring_capacity(), producers, &ring)) &&
            ok(access->proxy_->add_ring(ring_capacity(), gda::Producers::kHost, &access->host_ring_)) &&
            ok(backend->device_alloc(sizeof ring, &access->ring_)) &&
            ok(backend->copy(access->ring_, &ring, sizeof ring));
  }
  // This rank's memory and sync block, for the peers that map them.
  struct Published {
    ExportedBuffer memory;
    ExportedBuffer sync;
    std::uint64_t bytes;
    std::int32_t ready;
    std::int32_t exported;
  };
  Published mine{};
  mine.bytes = bytes;
  mine.ready = ready;
  mine.exported = ready && window.device && ok(group.peer_memory().export_buffer(access->sync_block_, &mine.sync)) &&
                  (bytes == 0 || ok(group.peer_memory().export_buffer(memory, &mine.memory)));
  std::vector<Published> all(n);
  FERRY_CHECK(boot.allgather(&mine, all.data(), sizeof mine));
  for (const Published& p : all)
    if (!p.ready) return Status::kUnavailable;
  access->executor_->add_window(kWindowId, memory, bytes);
  if (combiner) access->executor_->set_combiner(std::move(combiner));
  access->executor_->add_window(kSyncId, access->sync_block_, sync_bytes);

  // Tables as kernels read them: this rank's memory, and the peers' this
  // process maps; null for the ranks the queue reaches.
  std::vector<void*> peers(n, nullptr), sync(n, nullptr);
  std::vector<unsigned long long> peer_bytes(n);
  for (int r = 0; r < n; ++r) peer_bytes[r] = all[r].bytes;
  peers[me] = window.device ? memory : nullptr;
  sync[me] = access->sync_block_;
  for (int r = 0; r < n; ++r)
    if (r != me && all[r].exported && group.transports().to(r) && group.transports().to(r)->maps_device_memory())
      access->map_peer(all[r].memory, all[r].bytes, all[r].sync, &peers[r], &sync[r]);
  std::memcpy(tables.data(), peers.data(), pointer_bytes);
  std::memcpy(tables.data() + pointer_bytes, peer_bytes.data(), size_bytes);
  std::memcpy(tables.data() + pointer_bytes + size_bytes, sync.data(), pointer_bytes);
  FERRY_CHECK(backend->copy(access->tables_, tables.data(), tables.size()));
  char* device_tables = static_cast<char*>(access->tables_);

  ferry_window_device_t& h = access->handle_;
  h.rank = me;
  h.size = n;
  h.bytes = bytes;
  h.peers = reinterpret_cast<void* const*>(device_tables);
  h.peer_bytes = reinterpret_cast<const unsigned long long*>(device_tables + pointer_bytes);
  h.sync = reinterpret_cast<unsigned long long* const*>(device_tables + pointer_bytes + size_bytes);
  h.gda_ring = access->ring_;
  h.gda_window = kWindowId;
  h.gda_sync_window = kSyncId;
  // No rank posts to a peer before the peer serves its window.
  access->proxy_->start();
  FERRY_CHECK(boot.barrier());
  *out = std::move(access);
  return Status::kOk;
}

void RemoteAccess::map_peer(const ExportedBuffer& memory, std::uint64_t bytes, const ExportedBuffer& sync,
                            void** memory_here, void** sync_here) {
  PeerMemory& mappings = group_->peer_memory();
  if (!ok(mappings.pin_buffer(sync, sync_here))) return;
  pinned_.push_back(sync);
  // A peer without memory stays unmapped: nothing can reach its zero bytes.
  if (bytes != 0 && ok(mappings.pin_buffer(memory, memory_here))) pinned_.push_back(memory);
}

Status RemoteAccess::status() const { return proxy_ ? proxy_->status() : Status::kOk; }

Status RemoteAccess::quiet_host() const {
  // A failed queue fails every later call on the window, posted or not.
  if (!gda::wait_all_completed(host_ring_) && ok(status())) return Status::kInternal;
  return status();
}

RemoteAccess::~RemoteAccess() {
  // With a peer lost the other ranks cannot all meet: no barrier then.
  if (proxy_ && group_ && status() != Status::kPeerEnded) {
    // This rank's operations first (the peers still serve), then everyone's.
    gda::GdaRing ring{};
    if (ok(backend_->copy(&ring, ring_, sizeof ring))) {
      const auto deadline = handshake_deadline();
      std::uint64_t posted = 0, host_posted = __atomic_load_n(host_ring_.tickets, __ATOMIC_ACQUIRE);
      FERRY_LOG_IF_FAILED(backend_->copy(&posted, ring.tickets, sizeof posted));
      auto finished = [](const gda::GdaRing& r, std::uint64_t tickets) {
        return __atomic_load_n(&r.words->completed, __ATOMIC_ACQUIRE) >= tickets ||
               __atomic_load_n(&r.words->failed, __ATOMIC_ACQUIRE) != 0;
      };
      while (!(finished(ring, posted) && finished(host_ring_, host_posted)) &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    FERRY_LOG_IF_FAILED(group_->bootstrap().barrier());
  }
  proxy_.reset();
  executor_.reset();
  for (const ExportedBuffer& buffer : pinned_) group_->peer_memory().unpin_buffer(buffer);
  if (tables_) FERRY_LOG_IF_FAILED(backend_->device_free(tables_));
  if (ring_) FERRY_LOG_IF_FAILED(backend_->device_free(ring_));
  if (sync_block_) FERRY_LOG_IF_FAILED(backend_->device_free(sync_block_));
}

}  // namespace ferry
