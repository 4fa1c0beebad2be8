// One machine identity for every "same machine?" question: host name and
// boot id together.
#include "engine/topology/locality.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace ferry {
namespace {

TEST(Locality, OneHostNameOnTwoBootsIsTwoMachines) {
  // Two containers called alike on two hosts.
  EXPECT_NE(machine_identity_of("node", "boot-a"), machine_identity_of("node", "boot-b"));
  // Two machines cloned from one image.
  EXPECT_NE(machine_identity_of("node1", "boot-a"), machine_identity_of("node2", "boot-a"));
  EXPECT_EQ(machine_identity_of("node", "boot-a"), machine_identity_of("node", "boot-a"));
}

TEST(Locality, ThisProcessIsItsHostAndBoot) {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  EXPECT_EQ(machine_identity(), machine_identity_of(host, boot_id));
}

}  // namespace
}  // namespace ferry
