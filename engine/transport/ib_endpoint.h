// What two ranks exchange to join their reliable-connected queue pairs (the
// ib provider opens several per peer): each queue pair's number, the port's
// address (LID on InfiniBand, GID on RoCE), the first packet sequence
// number and the MTU. Fixed layout: endpoints travel in allgathers, and a
// peer's is checked before any of it is used.
#pragma once

#include <cstdint>

#include "engine/common/status.h"

namespace ferry {

constexpr int kIbMaxQueuePairs = 8;

struct IbEndpoint {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t queue_pairs;  // 1 .. kIbMaxQueuePairs
  std::uint32_t qpn[kIbMaxQueuePairs];  // 24-bit queue pair numbers
  std::uint32_t psn;                    // 24-bit
  std::uint16_t lid;                    // InfiniBand; 0 on RoCE
  std::uint8_t port;
  std::uint8_t ethernet;  // RoCE: address by gid
  std::uint8_t gid[16];
  std::uint32_t gid_index;
  std::uint32_t mtu_bytes;  // 256 .. 4096, a power of two
};
static_assert(sizeof(IbEndpoint) == 72, "IbEndpoint travels between processes; keep its layout fixed");

constexpr std::uint32_t kIbEndpointMagic = 0x46524942;  // "FRIB"
constexpr std::uint16_t kIbEndpointVersion = 1;

// Stamps magic and version.
IbEndpoint make_ib_endpoint();
// kInvalidArgument (and *why) when a peer's endpoint is not one this build
// can join: wrong magic or version, a queue-pair count, number, PSN or MTU
// out of range, no address (neither LID nor GID), or a link layer other
// than this rank's.
Status check_ib_endpoint(const IbEndpoint& peer, bool ethernet_here, const char** why);
// The MTU both ends support.
std::uint32_t common_mtu(const IbEndpoint& a, const IbEndpoint& b);

}  // namespace ferry
