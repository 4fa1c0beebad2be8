#include "engine/core/locality.h"

#include <fstream>

#include "engine/common/host_name.h"

namespace ferry {

std::uint64_t machine_identity_of(const std::string& host_name, const std::string& boot_id) {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a over "host/boot id"
  for (unsigned char c : host_name + "/" + boot_id) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::uint64_t machine_identity() {
  static const std::uint64_t identity = [] {
    std::string boot_id;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
    return machine_identity_of(host_name(), boot_id);
  }();
  return identity;
}

}  // namespace ferry
