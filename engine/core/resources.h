// Device resources an engine communicator reuses from call to call: streams,
// events and scratch per (backend, device), made on first use and kept, so
// the steady path of a call allocates nothing.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

#include "engine/gpu/gpu.h"

namespace ferry {

class DeviceResources {
 public:
  DeviceResources() = default;
  ~DeviceResources();
  DeviceResources(const DeviceResources&) = delete;
  DeviceResources& operator=(const DeviceResources&) = delete;

  // Stream `index` on device of backend (urgent:
  // gpu::Backend::stream_create_urgent, when it is created). Safe from any
  // thread (the progress thread of nonblocking calls looks streams up while
  // the application's thread may add others). With a GpuSpan open on the
  // calling thread, the stream's later work counts toward it.
  Status stream_for(gpu::Backend* backend, int device, gpu::Stream* stream, int index = 0, bool urgent = false);
  // Event `index` on device of backend; safe from any thread.
  Status event_for(gpu::Backend* backend, int device, gpu::Event* event, int index);
  // Device scratch of at least bytes on device, grown when a call needs
  // more; one thread at a time.
  Status scratch_for(gpu::Backend* backend, int device, std::size_t bytes, void** scratch);
  // Device memory of at least bytes for the pointer tables of kernels
  // queued on stream (executor.h), one per stream, so that writes ordered on
  // stream never overtake a kernel that reads it; kept while the streams
  // live, grown (after the stream drained) when a call needs more.
  Status table_for(gpu::Backend* backend, int device, gpu::Stream stream, std::size_t bytes, void** table);

 private:
  struct HandleKey {
    gpu::Backend* backend;
    int device;
    int index;
    bool operator<(const HandleKey& o) const {
      return backend != o.backend ? backend < o.backend : device != o.device ? device < o.device : index < o.index;
    }
  };
  struct Scratch {
    void* buffer;
    std::size_t bytes;
  };
  std::mutex handles_mutex_;
  std::map<HandleKey, gpu::Stream> streams_;
  std::map<HandleKey, gpu::Event> events_;
  std::map<std::pair<gpu::Backend*, int>, Scratch> scratch_;
  std::mutex tables_mutex_;
  std::map<std::pair<gpu::Backend*, gpu::Stream>, Scratch> tables_;
};

}  // namespace ferry
