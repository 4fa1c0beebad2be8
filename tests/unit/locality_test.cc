// One machine identity for every "same machine?" question: host name and
// boot id together, the host name FERRY_HOSTNAME's when set (the ctest
// locality.hostname_override runs these with it).
#include "engine/core/locality.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "engine/common/host_name.h"

namespace ferry {
namespace {

TEST(Locality, OneHostNameOnTwoBootsIsTwoMachines) {
  // Two containers called alike on two hosts.
  EXPECT_NE(machine_identity_of("node", "boot-a"), machine_identity_of("node", "boot-b"));
  // Two machines cloned from one image.
  EXPECT_NE(machine_identity_of("node1", "boot-a"), machine_identity_of("node2", "boot-a"));
  EXPECT_EQ(machine_identity_of("node", "boot-a"), machine_identity_of("node", "boot-a"));
}

// FERRY_HOSTNAME when set, else the machine's name.
std::string expected_host_name() {
  const char* given = std::getenv("FERRY_HOSTNAME");
  if (given && *given) return given;
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  return host;
}

TEST(Locality, ThisProcessIsItsHostAndBoot) {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  EXPECT_EQ(host_name(), expected_host_name());
  EXPECT_EQ(machine_identity(), machine_identity_of(expected_host_name(), boot_id));
}

TEST(Locality, PathPatternsNameTheHostAndProcess) {
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(expand_host_and_pid("trace-%h-%p.json"), "trace-" + expected_host_name() + "-" + pid + ".json");
  EXPECT_EQ(expand_host_and_pid("%r %% 100%"), "%r %% 100%");  // other escapes stay as they are
}

}  // namespace
}  // namespace ferry
