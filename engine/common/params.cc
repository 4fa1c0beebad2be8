#include "engine/common/params.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

extern char** environ;

namespace ferry {
namespace {

std::string env_name_of(const char* field) {
  std::string name = "FERRY_";
  for (const char* c = field; *c; ++c) name += static_cast<char>(std::toupper(*c));
  return name;
}

bool parse_value(const char* text, std::string* out) {
  *out = text;
  return true;
}

bool parse_value(const char* text, std::int64_t* out) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 0);
  if (errno == ERANGE) return false;  // beyond 64 bits: malformed, not clamped
  // K/M/G suffixes: sizes read better that way.
  if (end != text && *end && end[1] == '\0') {
    long long scale = 1;
    switch (std::toupper(*end)) {
      case 'K': scale = 1LL << 10; ++end; break;
      case 'M': scale = 1LL << 20; ++end; break;
      case 'G': scale = 1LL << 30; ++end; break;
      default: break;
    }
    if (__builtin_mul_overflow(v, scale, &v)) return false;
  }
  if (end == text || *end != '\0') return false;
  *out = v;
  return true;
}

bool parse_value(const char* text, bool* out) {
  std::string v = text;
  for (auto& c : v) c = static_cast<char>(std::tolower(c));
  if (v == "1" || v == "true" || v == "yes" || v == "on") {
    *out = true;
  } else if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) {
    *out = false;
  } else {
    return false;
  }
  return true;
}

const char* lookup(const std::vector<std::string>& environment, const std::string& name) {
  for (const std::string& entry : environment)
    if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=')
      return entry.c_str() + name.size() + 1;
  return nullptr;
}

std::string to_text(const std::string& v) { return v; }
std::string to_text(std::int64_t v) { return std::to_string(v); }
std::string to_text(bool v) { return v ? "1" : "0"; }

// What a value may be beyond its type: one of a few words (matched without
// regard to case, kept in the spelling here), or an integer in a range
// (every other Int: 0 or more).
// Constant-initialized: params() may run in another library's static
// initializer, before this file's dynamic ones.
struct Words {
  const char* field;
  const char* words[5];  // up to the first null
};
constexpr Words kWords[] = {
    {"device", {"auto", "cuda", "hip", "emulated"}},
    {"route", {"auto", "staged", "pmpi"}},
    {"debug", {"", "WARN", "INFO", "TRACE"}},
    {"gpu_leader", {"auto", "on", "off"}},
    {"pt2pt", {"peer", "staged"}},
    {"rma_across", {"mpi", "queue"}},
    {"gda_poll", {"host", "device"}},
    {"nbc", {"engine", "staged"}},
    {"net", {"auto", "ib", "mpi", "socket"}},
};
struct Range {
  const char* field;
  std::int64_t min, max;
};
constexpr Range kRanges[] = {
    {"channels", 1, 64},
    {"worker_blocks", 1, 64},
    {"socket_streams", 1, 16},
    {"ib_qps", 1, 8},
    {"ib_gid_index", 0, 255},
    {"gda_ring_slots", 8, 65536},
};

bool equal_ignoring_case(const std::string& a, const char* b) {
  const std::size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (std::size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// A value set in the environment outside what its parameter takes is
// reported and replaced by the default.
void check(const char* field, const char* default_value, std::string* value, std::vector<std::string>* problems) {
  for (const Words& allowed : kWords) {
    if (std::strcmp(allowed.field, field) != 0) continue;
    std::string list;
    for (const char* word : allowed.words) {
      if (!word) break;
      if (equal_ignoring_case(*value, word)) {
        *value = word;
        return;
      }
      list += std::string(list.empty() ? "" : ", ") + (*word ? word : "(empty)");
    }
    problems->push_back(env_name_of(field) + "=" + *value + " is not one of " + list + "; using the default (" +
                        (*default_value ? default_value : "empty") + ")");
    *value = default_value;
  }
}

void check(const char* field, const char* default_value, std::int64_t* value, std::vector<std::string>* problems) {
  Range range{field, 0, INT64_MAX};
  for (const Range& r : kRanges)
    if (std::strcmp(r.field, field) == 0) range = r;
  if (*value >= range.min && *value <= range.max) return;
  problems->push_back(env_name_of(field) + "=" + std::to_string(*value) + " is outside " + std::to_string(range.min) +
                      (range.max == INT64_MAX ? " or more" : " to " + std::to_string(range.max)) +
                      "; using the default (" + default_value + ")");
  parse_value(default_value, value);
}

void check(const char*, const char*, bool*, std::vector<std::string>*) {}

struct Parsed {
  Params params;
  std::vector<std::string> value_problems, unknown_names;
  std::vector<std::string> environment;
};

const Parsed& parsed() {
  static const Parsed* p = [] {
    auto* out = new Parsed;
    for (char** e = environ; e && *e; ++e)
      if (std::strncmp(*e, "FERRY_", 6) == 0) out->environment.emplace_back(*e);
    out->params = parse_params(out->environment, &out->value_problems, &out->unknown_names);
    return out;
  }();
  return *p;
}

}  // namespace

Params parse_params(const std::vector<std::string>& environment, std::vector<std::string>* problems,
                    std::vector<std::string>* unknown_names) {
  Params p;
#define FERRY_PARAM(field, type, default_value, category, description)                                   \
  parse_value(default_value, &p.field);                                                                   \
  if (const char* text = lookup(environment, env_name_of(#field)); text && !parse_value(text, &p.field)) { \
    problems->push_back(env_name_of(#field) + "=" + text + " is not a valid " #type "; using the default"); \
    parse_value(default_value, &p.field);                                                                 \
  } else if (text) {                                                                                      \
    check(#field, default_value, &p.field, problems);                                                     \
  }
#include "engine/common/params.def"
#undef FERRY_PARAM

  // A misspelt variable silently doing nothing is a classic support ticket.
  for (const std::string& entry : environment) {
    const std::string name = entry.substr(0, entry.find('='));
    if (name.compare(0, 6, "FERRY_") != 0) continue;
    bool known = false;
#define FERRY_PARAM(field, type, default_value, category, description) known = known || name == env_name_of(#field);
#include "engine/common/params.def"
#undef FERRY_PARAM
    if (!known) (unknown_names ? unknown_names : problems)->push_back(name + " is not a Ferry parameter (see ferry-info)");
  }
  return p;
}

const Params& params() { return parsed().params; }

std::vector<std::string> param_problems() {
  std::vector<std::string> all = parsed().value_problems;
  all.insert(all.end(), parsed().unknown_names.begin(), parsed().unknown_names.end());
  return all;
}

std::vector<std::string> param_value_problems() { return parsed().value_problems; }

std::vector<std::string> param_unknown_names() { return parsed().unknown_names; }

std::vector<ParamInfo> describe_params() {
  const Parsed& all = parsed();
  std::vector<ParamInfo> out;
#define FERRY_PARAM(field, type, default_value, category, description)                           \
  out.push_back({env_name_of(#field), #type, default_value, category, description,                \
                 to_text(all.params.field), lookup(all.environment, env_name_of(#field)) != nullptr});
#include "engine/common/params.def"
#undef FERRY_PARAM
  return out;
}

}  // namespace ferry
