// Logging by level and subsystem: FERRY_DEBUG=WARN|INFO|TRACE,
// FERRY_DEBUG_SUBSYS=INIT,GPU or ^STAGE. Silent by default.
#pragma once

namespace ferry {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// Bit flags, so FERRY_DEBUG_SUBSYS can select several.
enum class LogSubsys : unsigned {
  kInit = 1u << 0,
  kGpu = 1u << 1,
  kShim = 1u << 2,
  kRoute = 1u << 3,
  kStage = 1u << 4,
  kColl = 1u << 5,
  kTransport = 1u << 6,
  kTopo = 1u << 7,
  kBootstrap = 1u << 8,
  kPgas = 1u << 9,
  kAll = ~0u,
};

// Cheap test used by the macros before any formatting happens.
bool log_enabled(LogLevel level, LogSubsys subsys);

void log_message(LogLevel level, LogSubsys subsys, const char* file, int line,
                 const char* format, ...) __attribute__((format(printf, 5, 6)));

// Rank shown in log prefixes once known (set by the shim after MPI_Init).
void set_log_rank(int rank);

}  // namespace ferry

#define FERRY_LOG_AT(level, subsys, ...)                                       \
  do {                                                                         \
    if (::ferry::log_enabled(level, subsys))                                   \
      ::ferry::log_message(level, subsys, __FILE__, __LINE__, __VA_ARGS__);    \
  } while (0)

#define FERRY_WARN(subsys, ...) FERRY_LOG_AT(::ferry::LogLevel::kWarn, ::ferry::LogSubsys::k##subsys, __VA_ARGS__)
#define FERRY_INFO(subsys, ...) FERRY_LOG_AT(::ferry::LogLevel::kInfo, ::ferry::LogSubsys::k##subsys, __VA_ARGS__)
#define FERRY_TRACE(subsys, ...) FERRY_LOG_AT(::ferry::LogLevel::kTrace, ::ferry::LogSubsys::k##subsys, __VA_ARGS__)
