#include "engine/common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "engine/common/host_name.h"
#include "engine/common/params.h"

namespace ferry {
namespace {

struct SubsysName {
  const char* name;
  LogSubsys bit;
};

constexpr SubsysName kSubsysNames[] = {
    {"INIT", LogSubsys::kInit},   {"GPU", LogSubsys::kGpu},
    {"SHIM", LogSubsys::kShim},   {"ROUTE", LogSubsys::kRoute},
    {"STAGE", LogSubsys::kStage}, {"COLL", LogSubsys::kColl},
    {"TRANSPORT", LogSubsys::kTransport}, {"TOPO", LogSubsys::kTopo},
    {"BOOTSTRAP", LogSubsys::kBootstrap}, {"PGAS", LogSubsys::kPgas},
    {"ALL", LogSubsys::kAll},
};

const char* subsys_name(LogSubsys subsys) {
  for (const auto& s : kSubsysNames)
    if (s.bit == subsys) return s.name;
  return "ALL";
}

struct LogConfig {
  LogLevel level = LogLevel::kNone;
  unsigned subsys_mask = ~0u;
  FILE* out = stderr;
};

LogLevel parse_level(const std::string& text) {
  if (text == "WARN") return LogLevel::kWarn;
  if (text == "INFO") return LogLevel::kInfo;
  if (text == "TRACE") return LogLevel::kTrace;
  return LogLevel::kNone;
}

unsigned parse_subsys_mask(std::string text) {
  bool exclude = !text.empty() && text[0] == '^';
  if (exclude) text.erase(0, 1);
  unsigned mask = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    for (const auto& s : kSubsysNames)
      if (name == s.name) mask |= static_cast<unsigned>(s.bit);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? ~mask : mask;
}

FILE* open_log_file(const std::string& pattern) {
  if (pattern.empty()) return stderr;
  FILE* f = std::fopen(expand_host_and_pid(pattern).c_str(), "a");
  return f ? f : stderr;
}

std::atomic<int> log_rank{-1};

const LogConfig& config() {
  static const LogConfig cfg = [] {
    LogConfig c;
    const Params& p = params();
    c.level = parse_level(p.debug);
    c.subsys_mask = parse_subsys_mask(p.debug_subsys);
    if (c.level != LogLevel::kNone) c.out = open_log_file(p.debug_file);
    return c;
  }();
  return cfg;
}

}  // namespace

bool log_enabled(LogLevel level, LogSubsys subsys) {
  const LogConfig& c = config();
  return level <= c.level && (c.subsys_mask & static_cast<unsigned>(subsys)) != 0;
}

void set_log_rank(int rank) { log_rank.store(rank, std::memory_order_relaxed); }

void log_message(LogLevel level, LogSubsys subsys, const char* file, int line,
                 const char* format, ...) {
  static std::mutex mutex;
  static const char* const kLevelNames[] = {"NONE", "WARN", "INFO", "TRACE"};
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;

  char body[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(body, sizeof(body), format, args);
  va_end(args);

  // Seconds of the machine's monotonic clock: lines of the ranks of one
  // machine order by it.
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(config().out, "%s:%d:%d %.6f ferry %s %s %s:%d %s\n", host_name().c_str(), static_cast<int>(getpid()),
               log_rank.load(std::memory_order_relaxed), seconds, kLevelNames[static_cast<int>(level)],
               subsys_name(subsys), base, line, body);
  std::fflush(config().out);
}

}  // namespace ferry
