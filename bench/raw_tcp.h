// The floor a network of TCP sockets sets between two ranks, over
// connections of the benchmark's own (TCP_NODELAY) to the address rank 1's
// host name resolves to (loopback where both share a machine): an 8-byte
// ping-pong, and streaming bandwidth over several connections at once. For
// benchmarks that compare Ferry's socket provider with the raw path; host
// code, no Ferry.
#pragma once

#include <arpa/inet.h>
#include <mpi.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

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

inline void close_all(std::vector<int>* fds) {
  for (int fd : *fds)
    if (fd >= 0) close(fd);
  fds->clear();
}

// How long rank 1 waits for each connection, and for its index.
constexpr int kAcceptTimeoutMs = 10000;

// `streams` connections between ranks 0 and 1 of comm (collective), in
// the same order on both (each connection first carries its index); empty
// on every rank where any could not be set up, and on ranks past 1.
inline std::vector<int> connect_ranks(MPI_Comm comm, int streams) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // Rank 1 listens on an ephemeral port of its host's address.
  std::uint32_t address = htonl(INADDR_LOOPBACK);
  std::uint16_t port = 0;
  int listener = -1;
  if (rank == 1) {
    char host[256] = "";
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
    if (listener >= 0 && bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0 &&
        listen(listener, streams) == 0 && getsockname(listener, reinterpret_cast<sockaddr*>(&at), &length) == 0)
      port = at.sin_port;
  }
  std::uint32_t where[2] = {address, port};
  MPI_Bcast(where, 2, MPI_UINT32_T, 1, comm);
  std::vector<int> fds;
  if (where[1] != 0 && rank == 0) {
    for (int s = 0; s < streams; ++s) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = where[0];
      to.sin_port = static_cast<std::uint16_t>(where[1]);
      std::uint32_t index = static_cast<std::uint32_t>(s);
      fds.push_back(fd);
      if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 || !whole(fd, &index, 4, true))
        break;
    }
  } else if (where[1] != 0 && rank == 1) {
    fds.assign(static_cast<std::size_t>(streams), -1);
    for (int s = 0; s < streams; ++s) {
      // Bounded: rank 0 may have failed to connect and gone on to the
      // allreduce below.
      pollfd waiting{listener, POLLIN, 0};
      if (poll(&waiting, 1, kAcceptTimeoutMs) != 1) break;
      const int fd = accept(listener, nullptr, nullptr);
      std::uint32_t index = 0;
      pollfd first{fd, POLLIN, 0};
      if (fd < 0 || poll(&first, 1, kAcceptTimeoutMs) != 1 || !whole(fd, &index, 4, false) || index >= fds.size() ||
          fds[index] >= 0) {
        if (fd >= 0) close(fd);
        break;
      }
      fds[index] = fd;
    }
  }
  if (listener >= 0) close(listener);
  const int one = 1;
  int usable = rank > 1 || (fds.size() == static_cast<std::size_t>(streams) &&
                            std::none_of(fds.begin(), fds.end(), [](int fd) { return fd < 0; }));
  for (int fd : fds)
    if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int everyone = 0;
  MPI_Allreduce(&usable, &everyone, 1, MPI_INT, MPI_MIN, comm);
  if (!everyone) close_all(&fds);
  return fds;
}

}  // namespace detail

// One-way microseconds (round trip / 2, mean of `iterations` after 100
// warm-up rounds) of an 8-byte TCP ping-pong between ranks 0 and 1 of
// comm (collective over comm); -1 where a socket could not be set up.
inline double raw_tcp_one_way_us(MPI_Comm comm, int iterations) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::vector<int> fds = detail::connect_ranks(comm, 1);
  double one_way = -1;
  if (!fds.empty()) {
    const int fd = fds[0];
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
  detail::close_all(&fds);
  MPI_Bcast(&one_way, 1, MPI_DOUBLE, 0, comm);
  return one_way;
}

// GB/s of `bytes` from rank 0 to rank 1 of comm over `streams` connections
// at once (a thread each, an equal share each), timed on rank 0 until rank
// 1 answers that all arrived: the fastest of `iterations` after one to warm
// up (collective over comm); -1 where the sockets could not be set up.
inline double raw_tcp_streaming_gbps(MPI_Comm comm, std::size_t bytes, int streams, int iterations) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::vector<int> fds = detail::connect_ranks(comm, streams);
  double gbps = -1;
  if (!fds.empty()) {
    std::vector<char> data(bytes, 1);
    const std::size_t share = (bytes + streams - 1) / static_cast<std::size_t>(streams);
    double fastest = 0;
    bool fine = true;
    for (int i = -1; i < iterations && fine; ++i) {
      const double start = MPI_Wtime();
      std::vector<std::thread> threads;
      std::vector<char> moved(static_cast<std::size_t>(streams), 0);
      for (int s = 0; s < streams; ++s) {
        const std::size_t begin = std::min(bytes, s * share), end = std::min(bytes, begin + share);
        threads.emplace_back([&, s, begin, end] {
          moved[s] = detail::whole(fds[s], data.data() + begin, end - begin, rank == 0);
        });
      }
      for (std::thread& t : threads) t.join();
      fine = std::all_of(moved.begin(), moved.end(), [](char m) { return m != 0; });
      char answer = 1;
      fine = fine && detail::whole(fds[0], &answer, 1, rank == 1);
      const double seconds = MPI_Wtime() - start;
      if (i >= 0) fastest = i == 0 ? seconds : std::min(fastest, seconds);
    }
    if (fine && fastest > 0) gbps = double(bytes) / fastest / 1e9;
  }
  detail::close_all(&fds);
  MPI_Bcast(&gbps, 1, MPI_DOUBLE, 0, comm);
  return gbps;
}

}  // namespace bench
