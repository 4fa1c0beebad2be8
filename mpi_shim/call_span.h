// FERRY_TRACE's span of one intercepted call (engine/common/trace.h): from
// the wrapper's entry to its return, named after the function, with the
// route the call took, its bytes when the call says them
// (record_route, count_bytes) and the ranks it names; and the call's NVTX range where a profiler
// is attached (engine/common/nvtx.h). Off, constructing one reads two flags.
#pragma once

#include <cstdint>
#include <string>

#include "engine/common/nvtx.h"
#include "engine/common/trace.h"
#include "function_ids.h"
#include "mpi_shim/route.h"

namespace ferry::shim {

class CallSpan {
 public:
  explicit CallSpan(FunctionId id) {
    if (nvtx_attached()) {
      nvtx_push(function_name(id));
      nvtx_ = true;
    }
    if (!trace_enabled()) return;
    id_ = id;
    start_us_ = trace_now_us();
    outer_ = current_;
    current_ = this;
  }
  ~CallSpan() {
    if (start_us_ >= 0) close();
    if (nvtx_) nvtx_pop();
  }
  CallSpan(const CallSpan&) = delete;
  CallSpan& operator=(const CallSpan&) = delete;

  // The innermost open span of this thread, or nullptr.
  static CallSpan* current() { return current_; }
  void set_route(Route route, const char* reason) {
    route_ = route;
    reason_ = reason;
    routed_ = true;
  }
  void add_bytes(std::uint64_t bytes) { bytes_ += bytes; }
  // A rank the call names (role: "dest", "source", "root"), in the span's
  // arguments; the first two a call names.
  void note_rank(const char* role, int rank) {
    if (start_us_ < 0 || ranks_noted_ == 2) return;
    rank_roles_[ranks_noted_] = role;
    ranks_[ranks_noted_++] = rank;
  }

 private:
  void close();

  FunctionId id_{};
  std::int64_t start_us_ = -1;
  CallSpan* outer_ = nullptr;
  bool routed_ = false;
  Route route_{};
  const char* reason_ = "";
  std::uint64_t bytes_ = 0;
  int ranks_noted_ = 0;
  const char* rank_roles_[2] = {};
  int ranks_[2] = {};
  bool nvtx_ = false;
  static thread_local CallSpan* current_;
};

}  // namespace ferry::shim
