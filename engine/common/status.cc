#include "engine/common/status.h"

namespace ferry {

const char* status_name(Status status) {
  switch (status) {
    case Status::kOk: return "ok";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kOutOfMemory: return "out of memory";
    case Status::kUnsupported: return "unsupported";
    case Status::kUnavailable: return "unavailable";
    case Status::kGpuError: return "GPU runtime error";
    case Status::kSystemError: return "system error";
    case Status::kTimeout: return "timeout";
    case Status::kInternal: return "internal error";
    case Status::kCountMismatch: return "ranks passed different counts";
    case Status::kRootMismatch: return "ranks passed different roots";
    case Status::kTypeMismatch: return "ranks passed different datatypes";
    case Status::kOpMismatch: return "ranks passed different operations";
    case Status::kPeerEnded: return "a peer process has ended";
  }
  return "unknown status";
}

}  // namespace ferry
