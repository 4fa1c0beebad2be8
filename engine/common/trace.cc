#include "engine/common/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "engine/common/host_name.h"
#include "engine/common/log.h"
#include "engine/common/params.h"

namespace ferry {
namespace {

struct Kept {
  std::mutex mutex;
  std::vector<std::string> events;
  int rank = -1;
};

Kept& kept() {
  static Kept* k = new Kept;  // spans may end in other libraries' exit handlers
  return *k;
}

// Each track's lanes: the thread id that names a lane, and the end of its
// latest span.
struct Lane {
  long tid;
  std::int64_t end_us;
};

std::string complete_event(const char* name, const char* category, std::int64_t start_us, std::int64_t end_us,
                           long tid, const std::string& args) {
  char head[256];
  std::snprintf(head, sizeof head, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,\"tid\":%ld",
                trace_escape(name).c_str(), category, static_cast<long long>(start_us),
                static_cast<long long>(end_us > start_us ? end_us - start_us : 0), tid);
  std::string event = head;
  if (!args.empty()) event += ",\"args\":{" + args + "}";
  event += "}";
  return event;
}

}  // namespace

std::string trace_escape(const char* text) {
  std::string out;
  for (const char* c = text; *c; ++c) {
    if (*c == '"' || *c == '\\') {
      out += '\\';
      out += *c;
    } else if (static_cast<unsigned char>(*c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", *c);
      out += code;
    } else {
      out += *c;
    }
  }
  return out;
}

const bool g_trace_enabled = !params().trace.empty();

std::int64_t trace_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t trace_now_us() { return trace_now_ns() / 1000; }

void trace_span(const char* name, const char* category, std::int64_t start_us, std::int64_t end_us,
                const std::string& args) {
  if (!trace_enabled()) return;
  static thread_local const long tid = syscall(SYS_gettid);
  std::string event = complete_event(name, category, start_us, end_us, tid, args);
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  k.events.push_back(std::move(event));
}

void trace_async_span(const char* name, const char* category, std::uint64_t id, std::int64_t start_us,
                      std::int64_t end_us, const std::string& args) {
  if (!trace_enabled()) return;
  static thread_local const long tid = syscall(SYS_gettid);
  char begin[320], end[192];
  std::snprintf(begin, sizeof begin, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"b\",\"id\":%llu,\"ts\":%lld,\"tid\":%ld",
                trace_escape(name).c_str(), category, static_cast<unsigned long long>(id),
                static_cast<long long>(start_us), tid);
  std::snprintf(end, sizeof end, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"e\",\"id\":%llu,\"ts\":%lld,\"tid\":%ld}",
                trace_escape(name).c_str(), category, static_cast<unsigned long long>(id),
                static_cast<long long>(end_us > start_us ? end_us : start_us), tid);
  std::string first = begin;
  if (!args.empty()) first += ",\"args\":{" + args + "}";
  first += "}";
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  k.events.push_back(std::move(first));
  k.events.emplace_back(end);
}

void trace_track_span(const std::string& track, const char* name, const char* category, std::int64_t start_us,
                      std::int64_t end_us, const std::string& args) {
  if (!trace_enabled()) return;
  static std::map<std::string, std::vector<Lane>>* lanes = new std::map<std::string, std::vector<Lane>>;
  static long next_tid = 1L << 30;  // above any thread id of the process
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  std::vector<Lane>& mine = (*lanes)[track];
  auto lane = std::find_if(mine.begin(), mine.end(), [&](const Lane& l) { return l.end_us <= start_us; });
  if (lane == mine.end()) {
    const long tid = next_tid++;
    const std::string label = mine.empty() ? track : track + " (" + std::to_string(mine.size() + 1) + ")";
    k.events.push_back("{\"name\":\"thread_name\",\"ph\":\"M\",\"tid\":" + std::to_string(tid) +
                       ",\"args\":{\"name\":\"" + trace_escape(label.c_str()) + "\"}}");
    mine.push_back(Lane{tid, end_us});
    lane = mine.end() - 1;
  }
  lane->end_us = std::max(end_us, start_us);
  k.events.push_back(complete_event(name, category, start_us, end_us, lane->tid, args));
}

namespace {

void flow_event(const char* phase, std::uint64_t id) {
  static thread_local const long tid = syscall(SYS_gettid);
  char event[192];
  std::snprintf(event, sizeof event,
                "{\"name\":\"message\",\"cat\":\"flow\",\"ph\":\"%s\",\"bp\":\"e\",\"id\":%llu,\"ts\":%lld,"
                "\"tid\":%ld}",
                phase, static_cast<unsigned long long>(id), static_cast<long long>(trace_now_us()), tid);
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  k.events.emplace_back(event);
}

}  // namespace

std::uint64_t trace_new_flow_id() {
  static std::atomic<std::uint64_t> made{0};
  const std::uint64_t rank = static_cast<std::uint64_t>(std::max(kept().rank, 0));
  return ((rank + 1) << 40) | (made.fetch_add(1, std::memory_order_relaxed) + 1);
}

void trace_flow_start(std::uint64_t id) {
  if (trace_enabled() && id != 0) flow_event("s", id);
}

void trace_flow_finish(std::uint64_t id) {
  if (trace_enabled() && id != 0) flow_event("f", id);
}

void trace_set_rank(int rank) {
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  k.rank = rank;
}

std::string trace_path_for(const std::string& pattern, int rank) {
  std::string with_rank;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'r') {
      with_rank += std::to_string(rank);
      ++i;
    } else {
      with_rank += pattern[i];
    }
  }
  return expand_host_and_pid(with_rank);
}

bool trace_write() {
  if (!trace_enabled()) return true;
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  const int rank = k.rank < 0 ? 0 : k.rank;
  const std::string path = trace_path_for(params().trace, rank);
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (!file) {
    FERRY_WARN(Init, "FERRY_TRACE: cannot write %s", path.c_str());
    return false;
  }
  // Every event carries the rank as its process; the process is named.
  const std::string pid = ",\"pid\":" + std::to_string(rank) + "}";
  std::fprintf(file,
               "{\"displayTimeUnit\":\"us\",\"otherData\":{\"rank\":%d,\"host\":\"%s\",\"pid\":%d},\"traceEvents\":[\n"
               "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d (%s)\"}}",
               rank, trace_escape(host_name().c_str()).c_str(), static_cast<int>(getpid()), rank, rank,
               trace_escape(host_name().c_str()).c_str());
  for (const std::string& event : k.events) {
    std::fputs(",\n", file);
    std::fwrite(event.data(), 1, event.size() - 1, file);  // less its closing brace
    std::fputs(pid.c_str(), file);
  }
  std::fputs("\n]}\n", file);
  const bool written = std::fclose(file) == 0;
  if (!written) FERRY_WARN(Init, "FERRY_TRACE: writing %s failed", path.c_str());
  k.events.clear();
  return written;
}

}  // namespace ferry
