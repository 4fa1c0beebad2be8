// Small blocking helpers over TCP sockets shared by the TCP bootstrap and the
// net transport's socket provider: an owned descriptor, reads and writes with
// a deadline, random bytes and the keyed hash their challenge-responses use.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "engine/common/status.h"

namespace ferry {

// Closes its descriptor (a socket, or /dev/urandom) when it goes out of scope.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~OwnedFd() { reset(); }
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

using SocketClock = std::chrono::steady_clock;

// Milliseconds to deadline, for poll (0 once it passed).
int remaining_ms(SocketClock::time_point deadline);
// kTimeout when the deadline passes first.
Status wait_for(int fd, short events, SocketClock::time_point deadline);
// kUnavailable when the peer closed the connection.
Status read_exact(int fd, void* buffer, std::size_t bytes, SocketClock::time_point deadline);
Status write_all(int fd, const void* buffer, std::size_t bytes, SocketClock::time_point deadline);

// A TCP connection (non-blocking, TCP_NODELAY) to ipv4:port (network byte
// order, host byte order); refused attempts are retried until deadline
// (the listener may not be up yet): then kTimeout.
Status connect_ipv4(std::uint32_t ipv4, std::uint16_t port, SocketClock::time_point deadline, OwnedFd* out);
// The next connection on listener (non-blocking, TCP_NODELAY), and its
// address as "a.b.c.d:port"; kTimeout at deadline, kUnavailable for a
// connection that went away before it was taken.
Status accept_before(int listener, SocketClock::time_point deadline, OwnedFd* out, std::string* peer);

Status random_bytes(void* out, std::size_t bytes);

constexpr std::size_t kSecretBytes = 16;
// SipHash-2-4 (Aumasson & Bernstein): a keyed hash built for short inputs, so
// a peer proves it holds a secret without sending it.
std::uint64_t siphash24(const std::uint8_t (&key)[kSecretBytes], const std::uint8_t* data, std::size_t bytes);

}  // namespace ferry
