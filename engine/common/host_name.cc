#include "engine/common/host_name.h"

#include <unistd.h>

#include "engine/common/params.h"

namespace ferry {

const std::string& host_name() {
  static const std::string name = [] {
    if (!params().hostname.empty()) return params().hostname;
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    return std::string(host);
  }();
  return name;
}

std::string expand_host_and_pid(const std::string& pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] == '%' && (next == 'h' || next == 'p')) {
      out += next == 'h' ? host_name() : std::to_string(getpid());
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace ferry
