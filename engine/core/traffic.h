// Bytes each transport carried for this process since load, for
// FERRY_STATS: the data of the engine's calls and messages, counted once a
// call or message has moved it (collectives: allreduce and bcast their
// buffer, alltoallv what this rank sends to other ranks; messages through
// peer memory at their receive; one-sided puts and gets to other ranks).
// The net transport counts the bytes it puts on the network itself
// (net_transport.h).
#pragma once

#include <cstdint>

#include "engine/topology/search.h"

namespace ferry {

void count_traffic(TransportKind kind, std::uint64_t bytes);
std::uint64_t traffic_bytes(TransportKind kind);

}  // namespace ferry
