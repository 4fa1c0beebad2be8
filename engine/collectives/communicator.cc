#include "engine/collectives/communicator.h"

#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>

#include "engine/common/params.h"

namespace ferry {
namespace {

// Host name plus boot id: two containers with one name on different hosts
// must not believe they share memory.
std::uint64_t this_host_hash() {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return std::hash<std::string>{}(std::string(host) + "/" + boot_id);
}

}  // namespace

Status Communicator::create(std::unique_ptr<Bootstrap> bootstrap, std::unique_ptr<Communicator>* out) {
  if (!bootstrap) return Status::kUnavailable;
  std::unique_ptr<Communicator> comm(new Communicator(std::move(bootstrap)));
  const int n = comm->size();

  gpu::Backend* backend = gpu::active_backend();
  RankIdentity mine{this_host_hash(), static_cast<std::int32_t>(getpid()),
                    static_cast<std::int32_t>(backend ? backend->kind() : gpu::BackendKind::kNone),
                    backend ? backend->device_count() : 0, 0};
  std::vector<RankIdentity> ranks(n);
  FERRY_CHECK(comm->bootstrap_->allgather(&mine, ranks.data(), sizeof(mine)));

  // Same machine and same device backend: peer memory maps (on NVLink or
  // PCIe peer access CUDA IPC maps too; the driver enables peer access
  // lazily when the mapping is opened), or else host shared memory serves.
  // Every rank sees the same identities, so every rank makes the same choice
  // and the collective set-up below is entered by all or none.
  bool one_machine = mine.backend != static_cast<std::int32_t>(gpu::BackendKind::kNone);
  for (const RankIdentity& other : ranks)
    one_machine = one_machine && other.host_hash == mine.host_hash && other.backend == mine.backend;
  comm->all_peers_mapped_ = n == 1 || (one_machine && !params().p2p_disable);
  if (!comm->all_peers_mapped_ && one_machine && !params().shm_disable) {
    const Status status = SharedSegments::create(*comm->bootstrap_, backend,
                                                 static_cast<std::size_t>(params().shm_segment_bytes), &comm->shm_);
    if (!ok(status)) FERRY_WARN(Transport, "shm transport unavailable (%s): device buffers will be staged",
                                status_name(status));
  }
  FERRY_INFO(Init, "engine communicator of %d ranks: %s", n,
             comm->all_peers_mapped_ ? "every peer mapped (p2p)"
             : comm->shm_            ? "peers through host shared memory (shm)"
                                     : "no engine transport to every peer");
  *out = std::move(comm);
  return Status::kOk;
}

Communicator::~Communicator() {
  for (auto& [key, stream] : streams_) key.backend->stream_destroy(stream);
  for (auto& [key, event] : events_) key.backend->event_destroy(event);
  for (auto& [key, scratch] : scratch_) key.first->device_free(scratch.buffer);
}

namespace {

// The handle cached under key, made by create(&handle) on first use.
template <typename Cache, typename Create>
Status find_or_create(Cache& cache, const typename Cache::key_type& key, Create create,
                      typename Cache::mapped_type* handle) {
  auto it = cache.find(key);
  if (it == cache.end()) {
    typename Cache::mapped_type created = nullptr;
    FERRY_CHECK(create(&created));
    it = cache.emplace(key, created).first;
  }
  *handle = it->second;
  return Status::kOk;
}

}  // namespace

Status Communicator::event_for(gpu::Backend* backend, int device, gpu::Event* event, int index) {
  return find_or_create(events_, StreamKey{backend, device, index},
                        [backend](gpu::Event* created) { return backend->event_create(created); }, event);
}

Status Communicator::scratch_for(gpu::Backend* backend, int device, std::size_t bytes, void** scratch) {
  Scratch& s = scratch_[{backend, device}];
  if (s.bytes < bytes) {
    if (s.buffer) FERRY_CHECK(backend->device_free(s.buffer));
    s = Scratch{nullptr, 0};
    FERRY_CHECK(backend->device_alloc(bytes, &s.buffer));
    s.bytes = bytes;
    FERRY_INFO(Coll, "engine scratch of %zu bytes on device %d", bytes, device);
  }
  *scratch = s.buffer;
  return Status::kOk;
}

Status Communicator::stream_for(gpu::Backend* backend, int device, gpu::Stream* stream, int index) {
  return find_or_create(streams_, StreamKey{backend, device, index},
                        [backend](gpu::Stream* created) { return backend->stream_create(created); }, stream);
}

}  // namespace ferry
