#include "engine/topology/locality.h"

#include <unistd.h>

#include <fstream>

namespace ferry {

std::uint64_t machine_identity_of(const std::string& host_name, const std::string& boot_id) {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a over "host/boot id"
  for (unsigned char c : host_name + "/" + boot_id) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::uint64_t machine_identity() {
  static const std::uint64_t identity = [] {
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    std::string boot_id;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
    return machine_identity_of(host, boot_id);
  }();
  return identity;
}

}  // namespace ferry
