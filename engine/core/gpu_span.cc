#include "engine/core/gpu_span.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "engine/common/log.h"
#include "engine/common/trace.h"

namespace ferry {

// An event recorded on an idle stream of the device, and the system time it
// completed at: the middle of its record and synchronize, whose ends bound
// it. Never recorded again, so that a span's events stay measured from the
// anchor it took; a newer one replaces it for later spans.
struct GpuAnchor {
  gpu::Backend* backend = nullptr;
  gpu::Event event = nullptr;
  std::int64_t host_ns = 0;
  std::chrono::steady_clock::time_point made;
  ~GpuAnchor() {
    if (event) FERRY_LOG_IF_FAILED(backend->event_destroy(event));
  }
};

namespace {

// Events measure elapsed time as a float of milliseconds: an anchor older
// than this would blur them past a microsecond.
constexpr auto kAnchorLifetime = std::chrono::seconds(1);

struct DeviceState {
  gpu::Stream anchor_stream = nullptr;
  std::shared_ptr<GpuAnchor> anchor;
  std::vector<gpu::Event> free_events;
};

std::mutex g_devices_mutex;
std::map<std::pair<gpu::Backend*, int>, DeviceState>& devices() {
  static auto* states = new std::map<std::pair<gpu::Backend*, int>, DeviceState>;  // lives past exit handlers
  return *states;
}

thread_local GpuSpan* t_open_span = nullptr;

// An event from state's pool, or a new one; false where the backend cannot
// make one. The caller holds g_devices_mutex.
bool pooled_event(gpu::Backend* backend, DeviceState& state, gpu::Event* event) {
  if (state.free_events.empty()) return ok(backend->event_create(event));
  *event = state.free_events.back();
  state.free_events.pop_back();
  return true;
}

// An event from the device's pool (for a span's end, measured from the
// anchor its start took).
bool end_event(gpu::Backend* backend, int device, gpu::Event* event) {
  std::lock_guard<std::mutex> lock(g_devices_mutex);
  return pooled_event(backend, devices()[{backend, device}], event);
}

// The device's current anchor (made anew when missing or old), and an event
// from its pool; false where the backend cannot give them.
bool anchor_and_event(gpu::Backend* backend, int device, std::shared_ptr<GpuAnchor>* anchor, gpu::Event* event) {
  std::lock_guard<std::mutex> lock(g_devices_mutex);
  DeviceState& state = devices()[{backend, device}];
  const auto now = std::chrono::steady_clock::now();
  if (!state.anchor || now - state.anchor->made > kAnchorLifetime) {
    if (!state.anchor_stream && !ok(backend->stream_create_independent(&state.anchor_stream))) return false;
    auto made = std::make_shared<GpuAnchor>();
    made->backend = backend;
    if (!ok(backend->event_create(&made->event))) {
      made->event = nullptr;
      return false;
    }
    const std::int64_t before = trace_now_ns();
    if (!ok(backend->event_record(made->event, state.anchor_stream)) || !ok(backend->event_synchronize(made->event)))
      return false;
    made->host_ns = before + (trace_now_ns() - before) / 2;
    made->made = now;
    state.anchor = std::move(made);
  }
  *anchor = state.anchor;
  return pooled_event(backend, state, event);
}

void return_event(gpu::Backend* backend, int device, gpu::Event event) {
  if (!event) return;
  std::lock_guard<std::mutex> lock(g_devices_mutex);
  devices()[{backend, device}].free_events.push_back(event);
}

// The system time at which event completed, through anchor; false where it
// has not completed (the call failed before its work ran).
bool system_time_of(gpu::Backend* backend, const GpuAnchor& anchor, gpu::Event event, std::int64_t* ns) {
  bool done = false;
  float ms = 0;
  if (!ok(backend->event_done(event, &done)) || !done) return false;
  if (!ok(backend->event_elapsed_ms(anchor.event, event, &ms))) return false;
  *ns = anchor.host_ns + static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
  return true;
}

// The span [first_ns, last_ns] on device's track, within the host's bracket.
void add_to_track(int device, const char* name, std::int64_t first_ns, std::int64_t last_ns,
                  std::int64_t earliest_us, std::int64_t latest_us, const std::string& args) {
  const std::int64_t start_us = std::clamp(first_ns / 1000, earliest_us, latest_us);
  const std::int64_t end_us = std::clamp(last_ns / 1000, start_us, latest_us);
  trace_track_span("GPU " + std::to_string(device), name, "gpu", start_us, end_us, args);
}

}  // namespace

GpuSpan::GpuSpan() {
  if (!trace_enabled()) return;
  active_ = true;
  outer_ = t_open_span;
  t_open_span = this;
}

GpuSpan::~GpuSpan() {
  if (!active_) return;
  for (Mark& mark : marks_) {
    return_event(mark.backend, mark.device, mark.start);
    return_event(mark.backend, mark.device, mark.end);
  }
  close();
}

void GpuSpan::close() {
  if (active_ && t_open_span == this) t_open_span = outer_;
}

void GpuSpan::emit_until(gpu::Event end, const char* name, std::int64_t earliest_us, std::int64_t latest_us,
                         const std::string& args) {
  if (!active_ || marks_.empty()) return;
  std::int64_t first_ns = 0, last_ns = 0;
  const Mark& first = marks_.front();
  if (!system_time_of(first.backend, *first.anchor, end, &last_ns)) return;
  bool seen = false;
  for (const Mark& mark : marks_) {
    std::int64_t start_ns = 0;
    if (!system_time_of(mark.backend, *mark.anchor, mark.start, &start_ns)) continue;
    first_ns = seen ? std::min(first_ns, start_ns) : start_ns;
    seen = true;
  }
  if (seen) add_to_track(first.device, name, first_ns, last_ns, earliest_us, latest_us, args);
}

bool GpuSpan::open() { return trace_enabled() && t_open_span != nullptr; }

void GpuSpan::stream_handed_out(gpu::Backend* backend, int device, gpu::Stream stream) {
  if (!open()) return;
  GpuSpan* span = t_open_span;
  for (const Mark& mark : span->marks_)
    if (mark.backend == backend && mark.stream == stream) return;
  std::shared_ptr<GpuAnchor> anchor;
  gpu::Event start = nullptr;
  if (!anchor_and_event(backend, device, &anchor, &start)) return;
  if (!ok(backend->event_record(start, stream))) {
    return_event(backend, device, start);
    return;
  }
  span->marks_.push_back(Mark{backend, device, stream, start, nullptr, std::move(anchor)});
}

void GpuSpan::stream_finishing(gpu::Stream stream) {
  if (!open()) return;
  for (Mark& mark : t_open_span->marks_) {
    if (mark.stream != stream) continue;
    if (!mark.end && !end_event(mark.backend, mark.device, &mark.end)) return;
    if (!ok(mark.backend->event_record(mark.end, stream))) {
      return_event(mark.backend, mark.device, mark.end);
      mark.end = nullptr;
    }
    return;
  }
}

void GpuSpan::worker_ran(int device, std::int64_t start_ns, std::int64_t end_ns) {
  if (!open()) return;
  GpuSpan* span = t_open_span;
  if (span->worker_device_ < 0) {
    span->worker_device_ = device;
    span->worker_start_ns_ = start_ns;
    span->worker_end_ns_ = end_ns;
    return;
  }
  span->worker_start_ns_ = std::min(span->worker_start_ns_, start_ns);
  span->worker_end_ns_ = std::max(span->worker_end_ns_, end_ns);
}

void GpuSpan::emit(const char* name, std::int64_t earliest_us, std::int64_t latest_us, const std::string& args) {
  if (!active_) return;
  int device = worker_device_;
  bool seen = worker_device_ >= 0;
  std::int64_t first_ns = worker_start_ns_, last_ns = worker_end_ns_;
  for (const Mark& mark : marks_) {
    std::int64_t start_ns = 0, end_ns = 0;
    if (!mark.end || !system_time_of(mark.backend, *mark.anchor, mark.start, &start_ns) ||
        !system_time_of(mark.backend, *mark.anchor, mark.end, &end_ns))
      continue;
    first_ns = seen ? std::min(first_ns, start_ns) : start_ns;
    last_ns = seen ? std::max(last_ns, end_ns) : end_ns;
    if (device < 0) device = mark.device;
    seen = true;
  }
  if (seen) add_to_track(device, name, first_ns, last_ns, earliest_us, latest_us, args);
}

Status synchronize_stream(gpu::Backend* backend, gpu::Stream stream) {
  GpuSpan::stream_finishing(stream);
  return backend->stream_synchronize(stream);
}

Status copy_and_synchronize(gpu::Backend* backend, void* dst, const void* src, std::size_t bytes,
                            gpu::Stream stream) {
  if (!GpuSpan::open()) return backend->copy_and_wait(dst, src, bytes, stream);
  FERRY_CHECK(backend->copy_async(dst, src, bytes, stream));
  return synchronize_stream(backend, stream);
}

void DeviceClock::narrow(std::int64_t start_ns, std::int64_t end_ns, std::int64_t posted_ns, std::int64_t seen_ns) {
  const std::int64_t lowest = end_ns - seen_ns, highest = start_ns - posted_ns;
  if (!bounded_ || std::max(lowest_, lowest) > std::min(highest_, highest)) {
    lowest_ = lowest;
    highest_ = highest;
    bounded_ = true;
  } else {
    lowest_ = std::max(lowest_, lowest);
    highest_ = std::min(highest_, highest);
  }
  // Zero where the bounds allow it; else their middle (also where the
  // stamps span more than their bracket and the bounds cross).
  offset_ns_ = lowest_ <= 0 && 0 <= highest_ ? 0 : lowest_ + (highest_ - lowest_) / 2;
}

}  // namespace ferry
