#include "engine/core/resources.h"

#include "engine/common/log.h"
#include "engine/core/gpu_span.h"

namespace ferry {
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

DeviceResources::~DeviceResources() {
  for (auto& [key, stream] : streams_) FERRY_LOG_IF_FAILED(key.backend->stream_destroy(stream));
  for (auto& [key, event] : events_) FERRY_LOG_IF_FAILED(key.backend->event_destroy(event));
  for (auto& [key, scratch] : scratch_) FERRY_LOG_IF_FAILED(key.first->device_free(scratch.buffer));
  for (auto& [key, table] : tables_) FERRY_LOG_IF_FAILED(key.first->device_free(table.buffer));
}

Status DeviceResources::stream_for(gpu::Backend* backend, int device, gpu::Stream* stream, int index, bool urgent) {
  {
    std::lock_guard<std::mutex> lock(handles_mutex_);
    FERRY_CHECK(find_or_create(
        streams_, HandleKey{backend, device, index},
        [backend, urgent](gpu::Stream* created) {
          return urgent ? backend->stream_create_urgent(created) : backend->stream_create(created);
        },
        stream));
  }
  GpuSpan::stream_handed_out(backend, device, *stream);
  return Status::kOk;
}

Status DeviceResources::event_for(gpu::Backend* backend, int device, gpu::Event* event, int index) {
  std::lock_guard<std::mutex> lock(handles_mutex_);
  return find_or_create(events_, HandleKey{backend, device, index},
                        [backend](gpu::Event* created) { return backend->event_create(created); }, event);
}

Status DeviceResources::scratch_for(gpu::Backend* backend, int device, std::size_t bytes, void** scratch) {
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

Status DeviceResources::table_for(gpu::Backend* backend, int device, gpu::Stream stream, std::size_t bytes,
                                  void** table) {
  std::lock_guard<std::mutex> lock(tables_mutex_);
  Scratch& t = tables_[{backend, stream}];
  if (t.bytes < bytes) {
    if (t.buffer) {
      FERRY_CHECK(backend->stream_synchronize(stream));  // a kernel queued there may still read it
      FERRY_CHECK(backend->device_free(t.buffer));
    }
    t = Scratch{nullptr, 0};
    FERRY_CHECK(backend->set_device(device));
    FERRY_CHECK(backend->device_alloc(bytes, &t.buffer));
    t.bytes = bytes;
  }
  *table = t.buffer;
  return Status::kOk;
}

}  // namespace ferry
