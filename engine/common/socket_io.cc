#include "engine/common/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace ferry {

void OwnedFd::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

int remaining_ms(SocketClock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SocketClock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

Status wait_for(int fd, short events, SocketClock::time_point deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int ready = poll(&entry, 1, remaining_ms(deadline));
    if (ready > 0) return Status::kOk;
    if (ready == 0) return Status::kTimeout;
    if (errno != EINTR) return Status::kSystemError;
  }
}

Status read_exact(int fd, void* buffer, std::size_t bytes, SocketClock::time_point deadline) {
  auto* at = static_cast<char*>(buffer);
  while (bytes > 0) {
    // A timeout is an answer here (the caller names the missing peer), not a failure to trace.
    if (const Status status = wait_for(fd, POLLIN, deadline); !ok(status)) return status;
    const ssize_t got = recv(fd, at, bytes, MSG_DONTWAIT);
    if (got == 0) return Status::kUnavailable;
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return errno == ECONNRESET ? Status::kUnavailable : Status::kSystemError;
    }
    at += got;
    bytes -= static_cast<std::size_t>(got);
  }
  return Status::kOk;
}

Status write_all(int fd, const void* buffer, std::size_t bytes, SocketClock::time_point deadline) {
  const auto* at = static_cast<const char*>(buffer);
  while (bytes > 0) {
    if (const Status status = wait_for(fd, POLLOUT, deadline); !ok(status)) return status;
    const ssize_t sent = send(fd, at, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return errno == EPIPE || errno == ECONNRESET ? Status::kUnavailable : Status::kSystemError;
    }
    at += sent;
    bytes -= static_cast<std::size_t>(sent);
  }
  return Status::kOk;
}

Status connect_ipv4(std::uint32_t ipv4, std::uint16_t port, SocketClock::time_point deadline, OwnedFd* out) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = ipv4;
  address.sin_port = htons(port);
  do {
    OwnedFd socket_fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!socket_fd.valid()) return Status::kSystemError;
    int error = 0;
    if (connect(socket_fd.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      error = errno;
      if (error == EINPROGRESS && ok(wait_for(socket_fd.fd(), POLLOUT, deadline))) {
        socklen_t length = sizeof(error);
        getsockopt(socket_fd.fd(), SOL_SOCKET, SO_ERROR, &error, &length);
      }
    }
    if (error == 0) {
      const int one = 1;
      setsockopt(socket_fd.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      *out = std::move(socket_fd);
      return Status::kOk;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (SocketClock::now() < deadline);
  return Status::kTimeout;
}

Status accept_before(int listener, SocketClock::time_point deadline, OwnedFd* out, std::string* peer) {
  Status status = wait_for(listener, POLLIN, deadline);
  if (!ok(status)) return status;
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  OwnedFd accepted(
      accept4(listener, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!accepted.valid())
    return errno == EINTR || errno == ECONNABORTED || errno == EAGAIN ? Status::kUnavailable : Status::kSystemError;
  char text[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof(text));
  *peer = std::string(text) + ":" + std::to_string(ntohs(address.sin_port));
  const int one = 1;
  setsockopt(accepted.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *out = std::move(accepted);
  return Status::kOk;
}

Status random_bytes(void* out, std::size_t bytes) {
  OwnedFd urandom(open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!urandom.valid()) return Status::kSystemError;
  auto* at = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = read(urandom.fd(), at, bytes);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return Status::kSystemError;
    }
    at += got;
    bytes -= static_cast<std::size_t>(got);
  }
  return Status::kOk;
}

namespace {
std::uint64_t rotate_left(std::uint64_t x, int bits) { return (x << bits) | (x >> (64 - bits)); }
}  // namespace

std::uint64_t siphash24(const std::uint8_t (&key)[kSecretBytes], const std::uint8_t* data, std::size_t bytes) {
  std::uint64_t k0 = 0, k1 = 0;
  for (int i = 7; i >= 0; --i) k0 = (k0 << 8) | key[i];
  for (int i = 15; i >= 8; --i) k1 = (k1 << 8) | key[i];
  std::uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
  std::uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
  auto rounds = [&](int count) {
    for (int i = 0; i < count; ++i) {
      v0 += v1; v1 = rotate_left(v1, 13); v1 ^= v0; v0 = rotate_left(v0, 32);
      v2 += v3; v3 = rotate_left(v3, 16); v3 ^= v2;
      v0 += v3; v3 = rotate_left(v3, 21); v3 ^= v0;
      v2 += v1; v1 = rotate_left(v1, 17); v1 ^= v2; v2 = rotate_left(v2, 32);
    }
  };
  auto absorb = [&](std::uint64_t word) {
    v3 ^= word;
    rounds(2);
    v0 ^= word;
  };
  std::size_t at = 0;
  for (; at + 8 <= bytes; at += 8) {
    std::uint64_t word = 0;
    for (int i = 7; i >= 0; --i) word = (word << 8) | data[at + i];
    absorb(word);
  }
  std::uint64_t last = static_cast<std::uint64_t>(bytes) << 56;
  for (std::size_t i = 0; at + i < bytes; ++i) last |= static_cast<std::uint64_t>(data[at + i]) << (8 * i);
  absorb(last);
  v2 ^= 0xff;
  rounds(4);
  return v0 ^ v1 ^ v2 ^ v3;
}

}  // namespace ferry
