// With FERRY_TRACE: an engine call's device work as the device timed it, a
// span on the trace's track of that device ("GPU 0"), beside the call's
// host spans. The call opens a GpuSpan on its thread; every stream handed
// to it (DeviceResources::stream_for) gets an event before its work, and
// synchronize_stream an event after it; the engine worker reports its own
// clock's stamps of the call's item. The span runs from the earliest start
// to the latest end, on the system clock: events through an anchor event
// of the device whose host time is known to within one synchronize, the
// worker's stamps through a DeviceClock; and it lies within the host's
// bracket of the call, where the work could have begun and was seen done.
// Without FERRY_TRACE every hook returns after the load of one flag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/common/status.h"
#include "engine/gpu/gpu.h"

namespace ferry {

struct GpuAnchor;  // gpu_span.cc

class GpuSpan {
 public:
  // Opens on this thread where tracing is on (the open span before it, if
  // any, is closed to the hooks until this one closes).
  GpuSpan();
  ~GpuSpan();
  GpuSpan(const GpuSpan&) = delete;
  GpuSpan& operator=(const GpuSpan&) = delete;

  // Adds the span, named name, to its device's track, within the host's
  // bracket [earliest_us, latest_us]; nothing where no device work was seen.
  void emit(const char* name, std::int64_t earliest_us, std::int64_t latest_us, const std::string& args);
  // A nonblocking call: the hooks stop counting toward this span once its
  // work is queued (close), and the span ends at the call's own event, which
  // has completed (emit_until).
  void close();
  void emit_until(gpu::Event end, const char* name, std::int64_t earliest_us, std::int64_t latest_us,
                  const std::string& args);

  // Whether a span is open on this thread (the hooks below do nothing
  // otherwise).
  static bool open();
  // Before stream's first work for the open span: a start event.
  static void stream_handed_out(gpu::Backend* backend, int device, gpu::Stream stream);
  // After the work queued on stream so far: its end event.
  static void stream_finishing(gpu::Stream stream);
  // The engine worker ran the call's item on device from start_ns to end_ns
  // of the system clock.
  static void worker_ran(int device, std::int64_t start_ns, std::int64_t end_ns);

 private:
  struct Mark {
    gpu::Backend* backend;
    int device;
    gpu::Stream stream;
    gpu::Event start;
    gpu::Event end;  // null until the stream's work is waited for
    std::shared_ptr<GpuAnchor> anchor;  // what start and end are measured from
  };
  bool active_ = false;
  GpuSpan* outer_ = nullptr;
  std::vector<Mark> marks_;
  int worker_device_ = -1;
  std::int64_t worker_start_ns_ = 0, worker_end_ns_ = 0;
};

// Waits for the work queued on stream; with a GpuSpan open, marks its end
// first. Engine calls wait for their streams through this.
Status synchronize_stream(gpu::Backend* backend, gpu::Stream stream);
// Backend::copy_and_wait; with a GpuSpan open, the copy queued on stream
// and synchronize_stream, so that the span sees where it ended.
Status copy_and_synchronize(gpu::Backend* backend, void* dst, const void* src, std::size_t bytes,
                            gpu::Stream stream);

// A device clock on the system clock. Each item the device ran narrows the
// offset between them: the device's stamps of an item lie between when the
// host posted it and when the host saw it done. Where the device clock is
// the system clock already (CUDA's %globaltimer on Linux), that is kept.
class DeviceClock {
 public:
  // The device stamped start and end; the host posted at posted_ns and saw
  // the item done at seen_ns (system clock). An item that contradicts the
  // bounds so far (a clock that jumped) starts them again.
  void narrow(std::int64_t start_ns, std::int64_t end_ns, std::int64_t posted_ns, std::int64_t seen_ns);
  std::int64_t to_system_ns(std::int64_t device_ns) const { return device_ns - offset_ns_; }

 private:
  bool bounded_ = false;
  std::int64_t lowest_ = 0, highest_ = 0;  // bounds on device - system
  std::int64_t offset_ns_ = 0;
};

}  // namespace ferry
