#include "engine/bootstrap/tcp_bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/common/params.h"
#include "engine/common/socket_io.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// Wire format. Structs travel in host byte order: all ranks of a job share
// one architecture. Every message is a frame: a uint32 length, then that many
// bytes; the root rejects any handshake frame whose length is not exact.
constexpr std::uint32_t kMagic = 0x46525942;  // "FRYB"
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kNonceBytes = 16;

struct Hello {  // root -> joining rank
  std::uint32_t magic;
  std::uint32_t version;
  std::uint8_t nonce[kNonceBytes];
};
static_assert(sizeof(Hello) == 24, "Hello is part of the wire format");

struct Join {  // joining rank -> root
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t rank;
  std::int32_t size;
  std::uint64_t proof;  // keyed hash of the nonce, rank and size
};
static_assert(sizeof(Join) == 24, "Join is part of the wire format");

struct Welcome {  // root -> every rank, once all have joined
  std::uint32_t magic;
  std::int32_t size;
};
static_assert(sizeof(Welcome) == 8, "Welcome is part of the wire format");

// A silent or slow stranger must not hold up the ranks queued behind it.
constexpr auto kHandshakeLimit = std::chrono::seconds(5);

Status report(const TcpBootstrapOptions& options, Status status, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

Status report(const TcpBootstrapOptions& options, Status status, const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  FERRY_WARN(Bootstrap, "%s", text);
  if (options.failure) *options.failure = text;
  return status;
}

Status send_frame(int fd, const void* payload, std::size_t bytes, Clock::time_point deadline) {
  const auto length = static_cast<std::uint32_t>(bytes);
  Status status = write_all(fd, &length, sizeof(length), deadline);
  return ok(status) ? write_all(fd, payload, bytes, deadline) : status;
}

// A frame of exactly `bytes`; any other length is kInvalidArgument and is not
// read, so an oversized claim never makes us allocate or wait for it.
Status recv_frame(int fd, void* payload, std::size_t bytes, Clock::time_point deadline) {
  std::uint32_t length = 0;
  Status status = read_exact(fd, &length, sizeof(length), deadline);
  if (!ok(status)) return status;
  if (length != bytes) return Status::kInvalidArgument;
  return read_exact(fd, payload, bytes, deadline);
}

template <typename Message>
Status recv_message(int fd, Message* message, Clock::time_point deadline) {
  Status status = recv_frame(fd, message, sizeof(Message), deadline);
  if (ok(status) && message->magic != kMagic) return Status::kInvalidArgument;
  return status;
}

std::uint64_t join_proof(const std::uint8_t (&secret)[kSecretBytes], const Hello& hello, std::int32_t rank,
                         std::int32_t size) {
  std::uint8_t input[kNonceBytes + 2 * sizeof(std::int32_t)];
  std::memcpy(input, hello.nonce, kNonceBytes);
  std::memcpy(input + kNonceBytes, &rank, sizeof(rank));
  std::memcpy(input + kNonceBytes + sizeof(rank), &size, sizeof(size));
  return siphash24(secret, input, sizeof(input));
}

struct UniqueId {
  std::string host;
  int port = 0;
  std::uint8_t secret[kSecretBytes] = {};
};

bool parse_unique_id(const std::string& text, UniqueId* id) {
  const std::size_t second = text.rfind(':');
  if (second == std::string::npos || second == 0) return false;
  const std::size_t first = text.rfind(':', second - 1);
  if (first == std::string::npos || first == 0) return false;
  const std::string port = text.substr(first + 1, second - first - 1);
  const std::string secret = text.substr(second + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  if (secret.size() != 2 * kSecretBytes || secret.find_first_not_of("0123456789abcdef") != std::string::npos)
    return false;
  id->host = text.substr(0, first);
  id->port = std::stoi(port);
  for (std::size_t i = 0; i < kSecretBytes; ++i)
    id->secret[i] = static_cast<std::uint8_t>(std::stoi(secret.substr(2 * i, 2), nullptr, 16));
  return id->port > 0 && id->port < 65536;
}

Clock::time_point deadline_after(std::int64_t seconds) { return Clock::now() + std::chrono::seconds(seconds); }

std::int64_t timeout_of(const TcpBootstrapOptions& options) {
  return options.timeout_s >= 0 ? options.timeout_s : params().bootstrap_timeout;
}

// Listening sockets opened by create_unique_id, until rank 0 of that id
// calls make_tcp_bootstrap in the same process.
std::mutex listeners_mutex;
std::map<std::string, OwnedFd> listeners;

// The root may not be listening yet: refused connections are retried.
Status connect_with_retry(const UniqueId& id, Clock::time_point deadline, OwnedFd* out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(id.host.c_str(), std::to_string(id.port).c_str(), &hints, &found) != 0 || !found)
    return Status::kUnavailable;
  sockaddr_in address{};
  std::memcpy(&address, found->ai_addr, sizeof(address));
  freeaddrinfo(found);
  return connect_ipv4(address.sin_addr.s_addr, static_cast<std::uint16_t>(id.port), deadline, out);
}

std::string missing_ranks(const std::vector<OwnedFd>& peers) {
  std::string list;
  int count = 0;
  for (std::size_t r = 1; r < peers.size(); ++r) {
    if (peers[r].valid()) continue;
    list += (count++ ? ", " : "") + std::to_string(r);
  }
  return (count == 1 ? "rank " : "ranks ") + list;
}

class TcpBootstrap final : public Bootstrap {
 public:
  // Root: peers[r] is the connection to rank r (peers[0] unused). Others: one
  // connection, to the root.
  TcpBootstrap(int rank, int size, std::int64_t timeout_s, std::vector<OwnedFd> peers)
      : rank_(rank), size_(size), timeout_s_(timeout_s), peers_(std::move(peers)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allgather(const void* mine, void* all, std::size_t bytes) override {
    return rank_ == 0 ? gather_at_root(mine, static_cast<char*>(all), bytes, "allgather")
                      : gather_through_root(mine, all, bytes, "allgather");
  }

  Status barrier() override {
    const char mine = 0;
    std::vector<char> all(static_cast<std::size_t>(size_));
    return rank_ == 0 ? gather_at_root(&mine, all.data(), 1, "barrier")
                      : gather_through_root(&mine, all.data(), 1, "barrier");
  }

 private:
  Status gather_at_root(const void* mine, char* all, std::size_t bytes, const char* operation) {
    const auto deadline = deadline_after(timeout_s_);
    std::memcpy(all, mine, bytes);
    for (int r = 1; r < size_; ++r) {
      const Status status = recv_frame(peers_[r].fd(), all + r * bytes, bytes, deadline);
      if (status == Status::kTimeout)
        return report({}, status, "%s: rank %d of %d sent nothing to the bootstrap root within %lld s "
                      "(FERRY_BOOTSTRAP_TIMEOUT)", operation, r, size_, static_cast<long long>(timeout_s_));
      if (!ok(status))
        return report({}, status, "%s: rank %d of %d sent a malformed message or closed its bootstrap connection "
                      "(do all ranks pass the same byte count?)", operation, r, size_);
    }
    for (int r = 1; r < size_; ++r) {
      const Status status = send_frame(peers_[r].fd(), all, bytes * size_, deadline);
      if (!ok(status))
        return report({}, status, "%s: the bootstrap root could not send the result to rank %d of %d: %s", operation,
                      r, size_, status_name(status));
    }
    return Status::kOk;
  }

  Status gather_through_root(const void* mine, void* all, std::size_t bytes, const char* operation) {
    const auto deadline = deadline_after(timeout_s_);
    const int root = peers_[0].fd();
    Status status = send_frame(root, mine, bytes, deadline);
    if (ok(status)) status = recv_frame(root, all, bytes * size_, deadline);
    if (status == Status::kTimeout)
      return report({}, status, "%s: rank %d of %d got no answer from the bootstrap root within %lld s "
                    "(FERRY_BOOTSTRAP_TIMEOUT): another rank is not in the same call", operation, rank_, size_,
                    static_cast<long long>(timeout_s_));
    if (!ok(status))
      return report({}, status, "%s: rank %d of %d lost its bootstrap connection to the root: %s", operation, rank_,
                    size_, status_name(status));
    return Status::kOk;
  }

  int rank_;
  int size_;
  std::int64_t timeout_s_;
  std::vector<OwnedFd> peers_;
};

// Challenge one connection and, if it proves the secret and claims a free
// rank, place it in peers. A rejected stranger is only logged.
Status admit(OwnedFd connection, const std::string& from, const UniqueId& id, int size, Clock::time_point deadline,
             std::vector<OwnedFd>* peers, bool* admitted) {
  Hello hello{kMagic, kVersion, {}};
  FERRY_CHECK(random_bytes(hello.nonce, sizeof(hello.nonce)));
  Join join{};
  Status status = send_frame(connection.fd(), &hello, sizeof(hello), deadline);
  if (ok(status)) status = recv_message(connection.fd(), &join, deadline);
  const char* rejection = nullptr;
  if (!ok(status)) {
    rejection = status == Status::kInvalidArgument ? "a malformed or oversized join message"
                : status == Status::kTimeout       ? "no join message in time"
                                                   : "a closed connection";
  } else if (join.version != kVersion) {
    rejection = "another protocol version";
  } else if (join.size != size) {
    rejection = "another job size";
  } else if (join.rank < 1 || join.rank >= size) {
    rejection = "a rank out of range";
  } else if (join.proof != join_proof(id.secret, hello, join.rank, join.size)) {
    // The proof is a fixed-size integer: comparing it takes the same time
    // whichever bit differs, so it leaks nothing about the expected value.
    rejection = "a wrong secret";
  } else if ((*peers)[join.rank].valid()) {
    rejection = "a rank that already joined";
  }
  *admitted = rejection == nullptr;
  if (!ok(status)) {
    FERRY_WARN(Bootstrap, "bootstrap root rejected a connection from %s: %s", from.c_str(), rejection);
  } else if (rejection) {
    FERRY_WARN(Bootstrap, "bootstrap root rejected a connection from %s: %s (it claimed rank %d of %d)",
               from.c_str(), rejection, join.rank, join.size);
  } else {
    FERRY_TRACE(Bootstrap, "rank %d of %d joined the bootstrap from %s", join.rank, size, from.c_str());
    (*peers)[join.rank] = std::move(connection);
  }
  return Status::kOk;
}

Status form_at_root(const UniqueId& id, const std::string& id_text, int size, std::int64_t timeout_s,
                    const TcpBootstrapOptions& options, std::vector<OwnedFd>* peers) {
  OwnedFd listener;
  {
    std::lock_guard<std::mutex> lock(listeners_mutex);
    auto found = listeners.find(id_text);
    if (found == listeners.end())
      return report(options, Status::kInvalidArgument, "rank 0 of the TCP bootstrap must be the process that "
                    "created its id (create_unique_id), and may use it once");
    listener = std::move(found->second);
    listeners.erase(found);
  }
  peers->resize(static_cast<std::size_t>(size));
  const auto deadline = deadline_after(timeout_s);
  for (int joined = 1; joined < size;) {
    OwnedFd connection;
    std::string from;
    const Status status = accept_before(listener.fd(), deadline, &connection, &from);
    if (status == Status::kTimeout)
      return report(options, status, "%s of %d did not connect to the bootstrap root within %lld s "
                    "(FERRY_BOOTSTRAP_TIMEOUT)", missing_ranks(*peers).c_str(), size,
                    static_cast<long long>(timeout_s));
    if (status == Status::kUnavailable) continue;
    if (!ok(status)) return report(options, status, "bootstrap root: accept failed: %s", std::strerror(errno));
    bool admitted = false;
    FERRY_CHECK(admit(std::move(connection), from, id, size, std::min(deadline, Clock::now() + kHandshakeLimit),
                      peers, &admitted));
    joined += admitted;
  }
  const Welcome welcome{kMagic, size};
  for (int r = 1; r < size; ++r) {
    const Status status = send_frame((*peers)[r].fd(), &welcome, sizeof(welcome), deadline_after(timeout_s));
    if (!ok(status))
      return report(options, status, "bootstrap root could not confirm rank %d of %d: %s", r, size,
                    status_name(status));
  }
  FERRY_INFO(Bootstrap, "all %d ranks joined the TCP bootstrap at %s:%d", size, id.host.c_str(), id.port);
  return Status::kOk;
}

Status join_root(const UniqueId& id, int rank, int size, std::int64_t timeout_s, const TcpBootstrapOptions& options,
                 OwnedFd* root) {
  const auto deadline = deadline_after(timeout_s);
  Status status = connect_with_retry(id, deadline, root);
  if (!ok(status))
    return report(options, status, "rank %d of %d could not connect to the bootstrap root %s:%d within %lld s "
                  "(FERRY_BOOTSTRAP_TIMEOUT): %s", rank, size, id.host.c_str(), id.port,
                  static_cast<long long>(timeout_s), status_name(status));
  Hello hello{};
  status = recv_message(root->fd(), &hello, deadline);
  if (ok(status) && hello.version != kVersion) status = Status::kUnsupported;
  if (!ok(status))
    return report(options, status, "rank %d of %d: %s:%d did not greet as a Ferry bootstrap root of version %u: %s",
                  rank, size, id.host.c_str(), id.port, kVersion, status_name(status));
  const Join join{kMagic, kVersion, rank, size, join_proof(id.secret, hello, rank, size)};
  status = send_frame(root->fd(), &join, sizeof(join), deadline);
  Welcome welcome{};
  // The root confirms only once every rank joined; it closes the connection
  // when it rejects this rank or gives up on another.
  if (ok(status)) status = recv_message(root->fd(), &welcome, deadline);
  if (status == Status::kTimeout)
    return report(options, status, "rank %d of %d joined the bootstrap root %s:%d but not all ranks did within %lld s "
                  "(FERRY_BOOTSTRAP_TIMEOUT)", rank, size, id.host.c_str(), id.port, static_cast<long long>(timeout_s));
  if (!ok(status) || welcome.size != size)
    return report(options, ok(status) ? Status::kInvalidArgument : status,
                  "rank %d of %d was turned away by the bootstrap root %s:%d (wrong secret, duplicate rank, or "
                  "another rank missing: see the root's log)", rank, size, id.host.c_str(), id.port);
  return Status::kOk;
}

}  // namespace

Status create_unique_id(std::string* id, const TcpBootstrapOptions& options) {
  OwnedFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid())
    return report(options, Status::kSystemError, "bootstrap root: socket: %s", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(options.loopback ? INADDR_LOOPBACK : INADDR_ANY);
  address.sin_port = 0;  // ephemeral: several jobs may share a machine
  socklen_t length = sizeof(address);
  if (bind(listener.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(listener.fd(), SOMAXCONN) != 0 ||
      getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0)
    return report(options, Status::kSystemError, "bootstrap root: cannot listen: %s", std::strerror(errno));

  std::string host = "127.0.0.1";
  if (!options.loopback) {
    char name[256] = "";
    if (gethostname(name, sizeof(name) - 1) != 0)
      return report(options, Status::kSystemError, "bootstrap root: gethostname: %s", std::strerror(errno));
    host = name;
  }
  std::uint8_t secret[kSecretBytes];
  FERRY_CHECK(random_bytes(secret, sizeof(secret)));
  char secret_hex[2 * kSecretBytes + 1];
  for (std::size_t i = 0; i < kSecretBytes; ++i) std::snprintf(secret_hex + 2 * i, 3, "%02x", secret[i]);
  *id = host + ":" + std::to_string(ntohs(address.sin_port)) + ":" + secret_hex;

  std::lock_guard<std::mutex> lock(listeners_mutex);
  listeners[*id] = std::move(listener);
  return Status::kOk;
}

Status make_tcp_bootstrap(const std::string& id_text, int rank, int size, std::unique_ptr<Bootstrap>* out,
                          const TcpBootstrapOptions& options) {
  UniqueId id;
  if (!parse_unique_id(id_text, &id))
    return report(options, Status::kInvalidArgument, "not a TCP bootstrap id (host:port:32 hex digits)");
  if (size < 1 || rank < 0 || rank >= size)
    return report(options, Status::kInvalidArgument, "TCP bootstrap: rank %d is not in 0..%d", rank, size - 1);
  const std::int64_t timeout_s = timeout_of(options);
  std::vector<OwnedFd> peers(1);
  if (rank == 0) {
    FERRY_CHECK(form_at_root(id, id_text, size, timeout_s, options, &peers));
  } else {
    FERRY_CHECK(join_root(id, rank, size, timeout_s, options, &peers[0]));
  }
  *out = std::make_unique<TcpBootstrap>(rank, size, timeout_s, std::move(peers));
  return Status::kOk;
}

}  // namespace ferry
