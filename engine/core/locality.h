// Which processes share a machine: the one answer every part of Ferry uses
// (engine transports, topology, point-to-point through peer memory,
// windows). Two processes share a machine when their host names
// (host_name(): FERRY_HOSTNAME when set) and boot ids match: a host name
// alone would take two containers called alike on two hosts for one
// machine, and the boot id alone two machines cloned from one image before
// their first boot. Ranks given different FERRY_HOSTNAMEs are on different
// machines to every part of Ferry, though they run on one.
#pragma once

#include <cstdint>
#include <string>

namespace ferry {

// The identity of this process's machine, the same in every process of one
// boot of it that takes the same host name; read once.
std::uint64_t machine_identity();

// The identity of a machine with this host name and boot id (what
// machine_identity() computes).
std::uint64_t machine_identity_of(const std::string& host_name, const std::string& boot_id);

}  // namespace ferry
