// The floor a network of TCP sockets sets between two ranks: an 8-byte
// ping-pong over one connection of their own (TCP_NODELAY), the address
// rank 1's host name resolves to (loopback where both share a machine).
// For benchmarks that compare Ferry's socket provider with the raw round
// trip; host code, no Ferry.
#pragma once

#include <arpa/inet.h>
#include <mpi.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace bench {

namespace detail {

inline bool whole(int fd, void* data, std::size_t bytes, bool send) {
  char* at = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = send ? ::send(fd, at, bytes, MSG_NOSIGNAL) : ::recv(fd, at, bytes, 0);
    if (n <= 0) return false;
    at += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace detail

// One-way microseconds (round trip / 2, mean of `iterations` after 100
// warm-up rounds) of an 8-byte TCP ping-pong between ranks 0 and 1 of
// comm (collective over comm); -1 where a socket could not be set up.
inline double raw_tcp_one_way_us(MPI_Comm comm, int iterations) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int fd = -1;
  // Rank 1 listens on an ephemeral port of its host's address.
  char host[256] = "";
  std::uint32_t address = htonl(INADDR_LOOPBACK);
  std::uint16_t port = 0;
  int listener = -1;
  if (rank == 1) {
    gethostname(host, sizeof host);
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_INET;
    if (getaddrinfo(host, nullptr, &hints, &found) == 0 && found) {
      address = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr.s_addr;
      freeaddrinfo(found);
    }
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = address;
    socklen_t length = sizeof at;
    if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
        listen(listener, 1) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&at), &length) != 0) {
      port = 0;
    } else {
      port = at.sin_port;
    }
  }
  std::uint32_t where[2] = {address, port};
  MPI_Bcast(where, 2, MPI_UINT32_T, 1, comm);
  if (where[1] == 0) {
    if (listener >= 0) close(listener);
    return -1;
  }
  if (rank == 0) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = where[0];
    to.sin_port = static_cast<std::uint16_t>(where[1]);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      close(fd);
      fd = -1;
    }
  } else if (rank == 1) {
    fd = accept(listener, nullptr, nullptr);
    close(listener);
  }
  const int one = 1;
  if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int usable = rank > 1 || fd >= 0, everyone = 0;
  MPI_Allreduce(&usable, &everyone, 1, MPI_INT, MPI_MIN, comm);
  double one_way = -1;
  if (everyone && rank <= 1) {
    std::uint64_t word = 0;
    double start = 0;
    bool fine = true;
    for (int i = -100; i < iterations && fine; ++i) {
      if (i == 0) start = MPI_Wtime();
      fine = rank == 0 ? detail::whole(fd, &word, 8, true) && detail::whole(fd, &word, 8, false)
                       : detail::whole(fd, &word, 8, false) && detail::whole(fd, &word, 8, true);
    }
    if (fine) one_way = (MPI_Wtime() - start) * 1e6 / (2.0 * iterations);
  }
  if (fd >= 0) close(fd);
  MPI_Bcast(&one_way, 1, MPI_DOUBLE, 0, comm);
  return one_way;
}

}  // namespace bench
