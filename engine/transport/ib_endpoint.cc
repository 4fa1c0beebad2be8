#include "engine/transport/ib_endpoint.h"

#include <algorithm>

namespace ferry {

IbEndpoint make_ib_endpoint() {
  IbEndpoint e{};
  e.magic = kIbEndpointMagic;
  e.version = kIbEndpointVersion;
  return e;
}

Status check_ib_endpoint(const IbEndpoint& peer, bool ethernet_here, const char** why) {
  auto refuse = [&](const char* reason) {
    *why = reason;
    return Status::kInvalidArgument;
  };
  if (peer.magic != kIbEndpointMagic) return refuse("not an ib endpoint");
  if (peer.version != kIbEndpointVersion) return refuse("another version of the ib endpoint");
  if (peer.queue_pairs < 1 || peer.queue_pairs > kIbMaxQueuePairs) return refuse("queue pair count out of range");
  for (int q = 0; q < peer.queue_pairs; ++q)
    if (peer.qpn[q] == 0 || peer.qpn[q] > 0xFFFFFF) return refuse("queue pair number out of range");
  if (peer.psn > 0xFFFFFF) return refuse("packet sequence number out of range");
  const std::uint32_t mtu = peer.mtu_bytes;
  if (mtu < 256 || mtu > 4096 || (mtu & (mtu - 1)) != 0) return refuse("MTU not 256 .. 4096");
  if ((peer.ethernet != 0) != ethernet_here) return refuse("link layers differ (InfiniBand and RoCE)");
  const bool has_gid = std::any_of(peer.gid, peer.gid + 16, [](std::uint8_t b) { return b != 0; });
  if (peer.ethernet ? !has_gid : peer.lid == 0) return refuse("no address (LID or GID)");
  return Status::kOk;
}

std::uint32_t common_mtu(const IbEndpoint& a, const IbEndpoint& b) { return std::min(a.mtu_bytes, b.mtu_bytes); }

}  // namespace ferry
