// Between the socket provider's set-up (socket_connect.cc) and its message
// engine (socket_network.cc); nothing else includes this.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/common/socket_io.h"
#include "engine/transport/net.h"

namespace ferry {

// The authenticated streams to one peer (none to this rank itself).
struct SocketPeerLinks {
  std::string address;  // where the peer listens, for logs
  std::vector<OwnedFd> streams;
};

std::unique_ptr<NetProvider> make_socket_engine(int rank, int size, std::vector<SocketPeerLinks> peers);

}  // namespace ferry
