#include "engine/common/params.h"

#include <cctype>
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
  long long v = std::strtoll(text, &end, 0);
  // K/M/G suffixes: sizes read better that way.
  if (end != text && *end && end[1] == '\0') {
    switch (std::toupper(*end)) {
      case 'K': v <<= 10; ++end; break;
      case 'M': v <<= 20; ++end; break;
      case 'G': v <<= 30; ++end; break;
      default: break;
    }
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

struct Parsed {
  Params params;
  std::vector<std::string> problems;
  std::vector<std::string> environment;
};

const Parsed& parsed() {
  static const Parsed* p = [] {
    auto* out = new Parsed;
    for (char** e = environ; e && *e; ++e)
      if (std::strncmp(*e, "FERRY_", 6) == 0) out->environment.emplace_back(*e);
    out->params = parse_params(out->environment, &out->problems);
    return out;
  }();
  return *p;
}

}  // namespace

Params parse_params(const std::vector<std::string>& environment, std::vector<std::string>* problems) {
  Params p;
#define FERRY_PARAM(field, type, default_value, category, description)                                   \
  parse_value(default_value, &p.field);                                                                   \
  if (const char* text = lookup(environment, env_name_of(#field)); text && !parse_value(text, &p.field)) \
    problems->push_back(env_name_of(#field) + "=" + text + " is not a valid " #type "; using the default");
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
    if (!known) problems->push_back(name + " is not a Ferry parameter (see ferry-info)");
  }
  return p;
}

const Params& params() { return parsed().params; }

std::vector<std::string> param_problems() { return parsed().problems; }

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
