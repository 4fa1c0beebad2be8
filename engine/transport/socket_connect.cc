// The socket provider's set-up: the interface to listen on, the exchange of
// addresses and secret, and the authenticated connections (socket_network.h).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/bootstrap/verdict.h"
#include "engine/common/params.h"
#include "engine/transport/socket_links.h"
#include "engine/transport/socket_network.h"

namespace ferry {
namespace {

using Clock = SocketClock;

// Wire format of the handshake, in host byte order (all ranks of a job share
// one architecture). The acceptor greets with a nonce; the connector answers
// with who it is, a nonce of its own and its proof; the acceptor answers
// with its proof. Each proof hashes the other side's nonce, so neither can
// be replayed, and a role byte keeps one side's proof from serving as the
// other's.
constexpr std::uint32_t kMagic = 0x46525953;  // "FRYS"
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kNonceBytes = 16;
constexpr int kMaxStreams = 16;

struct Hello {  // acceptor -> connector
  std::uint32_t magic;
  std::uint32_t version;
  std::uint8_t nonce[kNonceBytes];
};
static_assert(sizeof(Hello) == 24, "Hello is part of the wire format");

struct Join {  // connector -> acceptor
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t rank;
  std::int32_t stream;
  std::int32_t size;
  std::int32_t unused;
  std::uint8_t nonce[kNonceBytes];
  std::uint64_t proof;
};
static_assert(sizeof(Join) == 48, "Join is part of the wire format");

struct Accept {  // acceptor -> connector
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t proof;
};
static_assert(sizeof(Accept) == 16, "Accept is part of the wire format");

// A silent or slow stranger must not hold up the ranks queued behind it.
constexpr auto kHandshakeLimit = std::chrono::seconds(5);

std::uint64_t proof_of(const std::uint8_t (&secret)[kSecretBytes], char role, const std::uint8_t* nonce,
                       std::int32_t rank, std::int32_t stream, std::int32_t size) {
  std::uint8_t input[1 + kNonceBytes + 3 * sizeof(std::int32_t)];
  input[0] = static_cast<std::uint8_t>(role);
  std::memcpy(input + 1, nonce, kNonceBytes);
  std::memcpy(input + 1 + kNonceBytes, &rank, sizeof(rank));
  std::memcpy(input + 1 + kNonceBytes + 4, &stream, sizeof(stream));
  std::memcpy(input + 1 + kNonceBytes + 8, &size, sizeof(size));
  return siphash24(secret, input, sizeof(input));
}

std::string dotted(std::uint32_t ipv4, int port) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr address{};
  address.s_addr = ipv4;
  inet_ntop(AF_INET, &address, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(port);
}

// Listens on the chosen address, an ephemeral port (several jobs may share a
// machine).
Status listen_on(const SocketInterface& interface, OwnedFd* listener, std::uint16_t* port) {
  OwnedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = interface.ipv4;
  socklen_t length = sizeof(address);
  if (!fd.valid() || bind(fd.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd.fd(), SOMAXCONN) != 0 || getsockname(fd.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    FERRY_WARN(Transport, "socket network: cannot listen on %s (%s): %s", interface.address.c_str(),
               interface.name.c_str(), std::strerror(errno));
    return Status::kSystemError;
  }
  *port = ntohs(address.sin_port);
  *listener = std::move(fd);
  return Status::kOk;
}

// Challenges one connection; a stranger or a duplicate is logged and dropped.
void admit(OwnedFd connection, const std::string& from, const std::uint8_t (&secret)[kSecretBytes], int rank,
           int size, int streams, Clock::time_point deadline, std::vector<SocketPeerLinks>* peers, int* admitted) {
  Hello hello{kMagic, kVersion, {}};
  Join join{};
  Status status = random_bytes(hello.nonce, sizeof(hello.nonce));
  if (ok(status)) status = write_all(connection.fd(), &hello, sizeof(hello), deadline);
  if (ok(status)) status = read_exact(connection.fd(), &join, sizeof(join), deadline);
  const char* rejection = nullptr;
  if (!ok(status)) {
    rejection = status == Status::kTimeout ? "no answer in time" : "a closed connection";
  } else if (join.magic != kMagic || join.version != kVersion) {
    rejection = "not a Ferry socket network of this version";
  } else if (join.size != size || join.rank <= rank || join.rank >= size || join.stream < 0 ||
             join.stream >= streams) {
    rejection = "a rank or stream out of range";
  } else if (join.proof != proof_of(secret, 'C', hello.nonce, join.rank, join.stream, join.size)) {
    rejection = "a wrong secret";
  } else if ((*peers)[join.rank].streams[join.stream].valid()) {
    rejection = "a stream that is already connected";
  }
  if (rejection) {
    FERRY_WARN(Transport, "socket network: rank %d dropped a connection from %s: %s", rank, from.c_str(), rejection);
    return;
  }
  const Accept accept{kMagic, kVersion, proof_of(secret, 'A', join.nonce, rank, join.stream, size)};
  if (!ok(write_all(connection.fd(), &accept, sizeof(accept), deadline))) {
    FERRY_WARN(Transport, "socket network: rank %d lost the connection from rank %d (%s) while accepting it", rank,
               join.rank, from.c_str());
    return;
  }
  (*peers)[join.rank].streams[join.stream] = std::move(connection);
  ++*admitted;
}

Status join(const SocketEndpoint& at, const std::uint8_t (&secret)[kSecretBytes], int rank, int peer, int stream,
            int size, Clock::time_point deadline, OwnedFd* out) {
  const std::string where = dotted(at.ipv4, at.port);
  OwnedFd connection;
  Status status = connect_ipv4(at.ipv4, at.port, deadline, &connection);
  Hello hello{};
  Join join{kMagic, kVersion, rank, stream, size, 0, {}, 0};
  if (ok(status)) status = random_bytes(join.nonce, sizeof(join.nonce));
  if (ok(status)) status = read_exact(connection.fd(), &hello, sizeof(hello), deadline);
  if (ok(status) && (hello.magic != kMagic || hello.version != kVersion)) status = Status::kInvalidArgument;
  join.proof = proof_of(secret, 'C', hello.nonce, rank, stream, size);
  if (ok(status)) status = write_all(connection.fd(), &join, sizeof(join), deadline);
  Accept accept{};
  if (ok(status)) status = read_exact(connection.fd(), &accept, sizeof(accept), deadline);
  if (ok(status) && (accept.magic != kMagic || accept.proof != proof_of(secret, 'A', join.nonce, peer, stream, size)))
    status = Status::kInvalidArgument;
  if (!ok(status)) {
    FERRY_WARN(Transport, "socket network: rank %d could not join rank %d at %s (stream %d): %s", rank, peer,
               where.c_str(), stream,
               status == Status::kInvalidArgument ? "it did not prove the job's secret" : status_name(status));
    return status;
  }
  *out = std::move(connection);
  return Status::kOk;
}

// Every pair once: this rank joins every lower one, then takes the streams
// of every higher one. The lowest rank only takes, so no wait goes round in
// a circle.
Status connect_all(Bootstrap& bootstrap, const std::vector<SocketEndpoint>& endpoints, int listener,
                   std::vector<SocketPeerLinks>* peers) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  const int streams = std::clamp<int>(endpoints[0].streams, 1, kMaxStreams);
  const auto deadline = Clock::now() + std::chrono::seconds(std::max<std::int64_t>(params().bootstrap_timeout, 1));
  peers->resize(static_cast<std::size_t>(size));
  for (int peer = 0; peer < size; ++peer) {
    (*peers)[peer].address = dotted(endpoints[peer].ipv4, endpoints[peer].port);
    if (peer != rank) (*peers)[peer].streams.resize(static_cast<std::size_t>(streams));
  }
  for (int peer = 0; peer < rank; ++peer)
    for (int stream = 0; stream < streams; ++stream)
      FERRY_CHECK(join(endpoints[peer], endpoints[0].secret, rank, peer, stream, size, deadline,
                       &(*peers)[peer].streams[stream]));
  const int expected = (size - 1 - rank) * streams;
  for (int admitted = 0; admitted < expected;) {
    OwnedFd connection;
    std::string from;
    const Status status = accept_before(listener, deadline, &connection, &from);
    if (status == Status::kUnavailable) continue;
    if (status == Status::kTimeout) {
      std::string missing;
      for (int peer = rank + 1; peer < size; ++peer)
        for (const OwnedFd& s : (*peers)[peer].streams)
          if (!s.valid()) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
            break;
          }
      FERRY_WARN(Transport, "socket network: rank %d waited %lld s (FERRY_BOOTSTRAP_TIMEOUT) for ranks %s to connect",
                 rank, static_cast<long long>(params().bootstrap_timeout), missing.c_str());
      return status;
    }
    FERRY_CHECK(status);
    admit(std::move(connection), from, endpoints[0].secret, rank, size, streams,
          std::min(deadline, Clock::now() + kHandshakeLimit), peers, &admitted);
  }
  return Status::kOk;
}

}  // namespace

std::string socket_interface_problem(const std::string& wanted) {
  if (wanted.empty()) return {};
  SocketInterface ignored;
  std::string problem;
  // The verdict is in problem (empty when the name is usable).
  if (ok(choose_socket_interface(wanted, &ignored, &problem))) return {};
  return problem;
}

Status choose_socket_interface(const std::string& wanted, SocketInterface* out, std::string* problem) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    FERRY_WARN(Transport, "socket network: getifaddrs: %s", std::strerror(errno));
    return Status::kSystemError;
  }
  // Up, with an IPv4 address, in the system's order.
  std::vector<std::pair<SocketInterface, bool>> usable;  // bool: loopback
  for (const ifaddrs* at = list; at; at = at->ifa_next) {
    if (!at->ifa_addr || at->ifa_addr->sa_family != AF_INET || !(at->ifa_flags & IFF_UP)) continue;
    SocketInterface found;
    found.name = at->ifa_name;
    found.ipv4 = reinterpret_cast<const sockaddr_in*>(at->ifa_addr)->sin_addr.s_addr;
    found.address = dotted(found.ipv4, 0);
    found.address.resize(found.address.size() - 2);  // without ":0"
    usable.push_back({found, (at->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  auto pick = [&](auto matches) {
    for (const auto& [interface, loopback] : usable)
      if (matches(interface, loopback)) {
        *out = interface;
        return true;
      }
    return false;
  };
  if (!wanted.empty()) {
    if (pick([&](const SocketInterface& i, bool) { return i.name == wanted; }) ||
        pick([&](const SocketInterface& i, bool) { return i.name.compare(0, wanted.size(), wanted) == 0; }))
      return Status::kOk;
    std::string names;
    for (const auto& entry : usable) names += (names.empty() ? "" : ", ") + entry.first.name;
    const std::string why = "FERRY_SOCKET_IFNAME=" + wanted +
                            ": no interface of that name or prefix is up with an IPv4 address (usable: " +
                            (names.empty() ? std::string("none") : names) + ")";
    if (problem) *problem = why;
    FERRY_WARN(Transport, "%s", why.c_str());
    return Status::kInvalidArgument;
  }
  if (pick([](const SocketInterface&, bool loopback) { return !loopback; }) ||
      pick([](const SocketInterface&, bool) { return true; }))
    return Status::kOk;
  FERRY_WARN(Transport, "socket network: no interface is up with an IPv4 address");
  return Status::kUnavailable;
}

SocketNetworkOptions SocketNetworkOptions::from_params() {
  SocketNetworkOptions options;
  options.ifname = params().socket_ifname;
  options.streams = static_cast<int>(params().socket_streams);
  return options;
}

Status make_socket_network(Bootstrap& bootstrap, std::unique_ptr<NetProvider>* out,
                           const SocketNetworkOptions& options) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  // Each rank's own failure is kept for itself; the others learn of it
  // through the exchange (port 0) and return kUnavailable.
  SocketEndpoint mine{};
  mine.streams = static_cast<std::uint16_t>(std::clamp(options.streams, 1, kMaxStreams));
  SocketInterface interface;
  OwnedFd listener;
  Status status = choose_socket_interface(options.ifname, &interface);
  if (ok(status)) status = listen_on(interface, &listener, &mine.port);
  if (ok(status) && rank == 0) status = random_bytes(mine.secret, sizeof(mine.secret));
  if (!ok(status)) mine.port = 0;
  mine.ipv4 = interface.ipv4;
  std::vector<SocketEndpoint> endpoints(static_cast<std::size_t>(size));
  FERRY_CHECK(bootstrap.allgather(&mine, endpoints.data(), sizeof(mine)));
  if (!ok(status)) return status;
  for (int r = 0; r < size; ++r)
    if (endpoints[r].port == 0) {
      FERRY_WARN(Transport, "socket network: rank %d of %d could not listen (see its log)", r, size);
      return Status::kUnavailable;
    }
  FERRY_INFO(Transport, "socket network: rank %d listens on %s (%s), %d streams a peer", rank,
             dotted(mine.ipv4, mine.port).c_str(), interface.name.c_str(), std::clamp<int>(endpoints[0].streams, 1,
                                                                                             kMaxStreams));

  std::vector<SocketPeerLinks> peers;
  status = connect_all(bootstrap, endpoints, listener.fd(), &peers);
  FERRY_CHECK(agree_on_setup(bootstrap, status, "socket network", "could not connect its streams"));
  *out = make_socket_engine(rank, size, std::move(peers));
  return Status::kOk;
}

}  // namespace ferry
