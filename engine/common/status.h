// One status type for the whole engine. No exceptions cross the C boundary
// and nothing here ever exits: failures travel up as a Status, and each frame
// that forwards one leaves a breadcrumb in the log (FERRY_DEBUG=WARN). A
// Status is never dropped unseen ([[nodiscard]]): one the caller cannot act
// on goes through FERRY_LOG_IF_FAILED.
#pragma once

#include "engine/common/log.h"

namespace ferry {

enum class [[nodiscard]] Status : int {
  kOk = 0,
  kInvalidArgument,
  kOutOfMemory,
  kUnsupported,
  kUnavailable,   // the backend or resource is not present on this machine
  kGpuError,
  kSystemError,
  kTimeout,
  kInternal,
  // Ranks called a collective with different arguments (agreement.h).
  kCountMismatch,
  kRootMismatch,
  kTypeMismatch,
  kOpMismatch,
  kPeerEnded,  // a peer process ended while this one waited for it (liveness.h)
};

const char* status_name(Status status);

inline bool ok(Status status) { return status == Status::kOk; }

}  // namespace ferry

// Logs a failed status with the expression that returned it, at the
// caller's line (FERRY_CHECK, FERRY_LOG_IF_FAILED).
#define FERRY_LOG_FAILURE_(status, text)                                           \
  FERRY_LOG_AT(::ferry::LogLevel::kWarn, ::ferry::LogSubsys::kAll, "%s failed: %s", text, \
               ::ferry::status_name(status))

// Forward a failure to the caller, logging where it passed.
#define FERRY_CHECK(expr)                                                        \
  do {                                                                           \
    ::ferry::Status ferry_check_status_ = (expr);                                \
    if (ferry_check_status_ != ::ferry::Status::kOk) {                           \
      FERRY_LOG_FAILURE_(ferry_check_status_, #expr);                            \
      return ferry_check_status_;                                                \
    }                                                                            \
  } while (0)

// Evaluates a Status the caller can do nothing about (a release in a
// destructor, clean-up after an earlier failure): a failure is logged like
// FERRY_CHECK's and dropped.
#define FERRY_LOG_IF_FAILED(expr)                                                \
  do {                                                                           \
    ::ferry::Status ferry_check_status_ = (expr);                                \
    if (ferry_check_status_ != ::ferry::Status::kOk) FERRY_LOG_FAILURE_(ferry_check_status_, #expr); \
  } while (0)
