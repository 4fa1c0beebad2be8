#include "engine/transport/fd_passing.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "engine/common/params.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace ferry {

const char* fd_passing_name(FdPassing method) {
  switch (method) {
    case FdPassing::kAuto: return "auto";
    case FdPassing::kPidfd: return "pidfd";
    case FdPassing::kSocket: return "socket";
  }
  return "?";
}

namespace {

// What each rank says before any descriptor moves; its offered descriptor
// numbers follow it in the same allgather.
struct Offer {
  std::int32_t pid;
  std::uint32_t count;
  std::uint64_t nonce;      // rank 0's names the call's sockets
  std::uint32_t use_pidfd;  // this rank asks for pidfd
  std::uint32_t reserved;
};
static_assert(sizeof(Offer) == 24, "Offer travels between processes; keep its layout fixed");

// Descriptors in one SCM_RIGHTS message (the kernel takes up to 253).
constexpr std::size_t kFdsPerMessage = 64;

// Set once pidfd_getfd failed in this process: later calls go straight to the socket.
std::atomic<bool> pidfd_failed{false};

void close_all(std::vector<int>& fds) {
  for (int& fd : fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

// True on every rank when every rank says ok.
Status agree(Bootstrap& bootstrap, bool mine, bool* everyone) {
  const std::uint8_t flag = mine ? 1 : 0;
  std::vector<std::uint8_t> flags(bootstrap.size());
  FERRY_CHECK(bootstrap.allgather(&flag, flags.data(), 1));
  *everyone = true;
  for (std::uint8_t f : flags) *everyone = *everyone && f;
  return Status::kOk;
}

// Milliseconds left of the bootstrap timeout, for poll (-1: no limit).
class Deadline {
 public:
  Deadline() : limit_s_(params().bootstrap_timeout), start_(std::chrono::steady_clock::now()) {}
  int left_ms() const {
    if (limit_s_ <= 0) return -1;
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_);
    const long long left = limit_s_ * 1000 - spent.count();
    return left > 0 ? static_cast<int>(left) : 0;
  }

 private:
  std::int64_t limit_s_;
  std::chrono::steady_clock::time_point start_;
};

// Waits until fd is ready for events; false on timeout or error.
bool wait_for(int fd, short events, const Deadline& deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = poll(&p, 1, deadline.left_ms());
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// Takes every rank's descriptors with pidfd_getfd; false (and nothing kept)
// when any could not be taken.
bool take_with_pidfd(int rank, const std::vector<Offer>& offers, const std::vector<std::int32_t>& numbers,
                     std::size_t count, int* all) {
  const int n = static_cast<int>(offers.size());
  std::vector<int> got(n * count, -1);
  std::map<std::int32_t, int> pidfds;
  bool ok_so_far = true;
  for (int q = 0; q < n && ok_so_far; ++q) {
    int pidfd = -1;
    if (offers[q].pid != offers[rank].pid) {
      auto it = pidfds.find(offers[q].pid);
      if (it == pidfds.end()) {
        pidfd = static_cast<int>(syscall(SYS_pidfd_open, offers[q].pid, 0));
        if (pidfd < 0) {
          FERRY_INFO(Transport, "fd passing: pidfd_open(%d) for rank %d: %s", offers[q].pid, q, std::strerror(errno));
          ok_so_far = false;
          break;
        }
        it = pidfds.emplace(offers[q].pid, pidfd).first;
      }
      pidfd = it->second;
    }
    for (std::size_t i = 0; i < count; ++i) {
      const int number = numbers[q * count + i];
      // Our own process: a duplicate is all it takes (ranks as threads).
      const int fd = pidfd < 0 ? fcntl(number, F_DUPFD_CLOEXEC, 0)
                               : static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, number, 0));
      if (fd < 0) {
        FERRY_INFO(Transport, "fd passing: descriptor %d of rank %d (pid %d): %s", number, q, offers[q].pid,
                   std::strerror(errno));
        ok_so_far = false;
        break;
      }
      got[q * count + i] = fd;
    }
  }
  for (auto& [pid, pidfd] : pidfds) close(pidfd);
  if (!ok_so_far) {
    close_all(got);
    return false;
  }
  std::memcpy(all, got.data(), got.size() * sizeof(int));
  return true;
}

// The abstract socket name of rank's listener in this call.
sockaddr_un socket_name(std::uint64_t nonce, std::int32_t pid, int rank, socklen_t* length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // sun_path[0] == 0: the abstract namespace, gone when the socket closes.
  const int written = std::snprintf(address.sun_path + 1, sizeof(address.sun_path) - 1, "ferry-fd-%016llx-%d-%d",
                                    static_cast<unsigned long long>(nonce), pid, rank);
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + written);
  return address;
}

bool send_fds(int socket_fd, const int* fds, std::size_t count, const Deadline& deadline) {
  for (std::size_t sent = 0; sent < count;) {
    const std::uint32_t batch = static_cast<std::uint32_t>(std::min(kFdsPerMessage, count - sent));
    alignas(cmsghdr) char control[CMSG_SPACE(kFdsPerMessage * sizeof(int))] = {};
    std::uint32_t header = batch;
    iovec data{&header, sizeof(header)};
    msghdr message{};
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(batch * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&message);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(batch * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds + sent, batch * sizeof(int));
    if (!wait_for(socket_fd, POLLOUT, deadline)) return false;
    if (sendmsg(socket_fd, &message, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(header))) return false;
    sent += batch;
  }
  return true;
}

bool receive_fds(int socket_fd, int* fds, std::size_t count, const Deadline& deadline) {
  for (std::size_t received = 0; received < count;) {
    alignas(cmsghdr) char control[CMSG_SPACE(kFdsPerMessage * sizeof(int))] = {};
    std::uint32_t header = 0;
    iovec data{&header, sizeof(header)};
    msghdr message{};
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    if (!wait_for(socket_fd, POLLIN, deadline)) return false;
    if (recvmsg(socket_fd, &message, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(sizeof(header))) return false;
    cmsghdr* c = CMSG_FIRSTHDR(&message);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return false;
    const std::size_t got = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const bool fits = got == header && received + got <= count && !(message.msg_flags & MSG_CTRUNC);
    std::memcpy(fds + received, CMSG_DATA(c), std::min(got, count - received) * sizeof(int));
    if (!fits) {
      for (std::size_t i = 0; i < std::min(got, count - received); ++i) close(fds[received + i]);
      return false;
    }
    received += got;
  }
  return true;
}

// Every rank listens; each connects to every other, says who it is, and
// receives that rank's descriptors. Connections queue in the listener's
// backlog, so all ranks connect first and accept after without waiting on
// each other.
Status exchange_over_sockets(Bootstrap& bootstrap, const std::vector<Offer>& offers, const int* mine,
                             std::size_t count, int* all) {
  const int n = bootstrap.size();
  const int rank = bootstrap.rank();
  const std::uint64_t nonce = offers[0].nonce;
  const Deadline deadline;
  socklen_t length = 0;
  const sockaddr_un own = socket_name(nonce, offers[rank].pid, rank, &length);
  int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  bool listening = listener >= 0 && bind(listener, reinterpret_cast<const sockaddr*>(&own), length) == 0 &&
                   listen(listener, n) == 0;
  if (!listening)
    FERRY_WARN(Transport, "fd passing: cannot listen on @%s: %s", own.sun_path + 1, std::strerror(errno));
  bool everyone = false;
  const Status status = agree(bootstrap, listening, &everyone);
  if (!ok(status) || !everyone) {
    if (listener >= 0) close(listener);
    FERRY_CHECK(status);
    return Status::kUnavailable;
  }

  std::vector<int> got(n * count, -1);
  std::vector<int> outgoing(n, -1);
  bool fine = true;
  for (int q = 0; q < n && fine; ++q) {
    if (q == rank) {
      for (std::size_t i = 0; i < count && fine; ++i)
        fine = (got[q * count + i] = fcntl(mine[i], F_DUPFD_CLOEXEC, 0)) >= 0;
      continue;
    }
    const sockaddr_un peer = socket_name(nonce, offers[q].pid, q, &length);
    outgoing[q] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const std::int32_t who = rank;
    fine = outgoing[q] >= 0 && connect(outgoing[q], reinterpret_cast<const sockaddr*>(&peer), length) == 0 &&
           send(outgoing[q], &who, sizeof(who), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(who));
    if (!fine) FERRY_WARN(Transport, "fd passing: cannot reach rank %d at @%s: %s", q, peer.sun_path + 1,
                          std::strerror(errno));
  }
  // Serve every peer that connected, in whatever order they come.
  for (int served = 0; served < n - 1 && fine; ++served) {
    fine = wait_for(listener, POLLIN, deadline);
    const int connection = fine ? accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) : -1;
    std::int32_t who = -1;
    fine = connection >= 0 && wait_for(connection, POLLIN, deadline) &&
           recv(connection, &who, sizeof(who), 0) == static_cast<ssize_t>(sizeof(who)) && who >= 0 && who < n &&
           send_fds(connection, mine, count, deadline);
    if (!fine) FERRY_WARN(Transport, "fd passing: serving a peer (rank %d) failed: %s", who, std::strerror(errno));
    if (connection >= 0) close(connection);
  }
  for (int q = 0; q < n && fine; ++q) {
    if (q == rank) continue;
    fine = receive_fds(outgoing[q], got.data() + q * count, count, deadline);
    if (!fine) FERRY_WARN(Transport, "fd passing: no descriptors from rank %d (timeout or error)", q);
  }
  for (int fd : outgoing)
    if (fd >= 0) close(fd);
  close(listener);
  FERRY_CHECK(agree(bootstrap, fine, &everyone));
  if (!everyone) {
    close_all(got);
    return Status::kUnavailable;
  }
  std::memcpy(all, got.data(), got.size() * sizeof(int));
  return Status::kOk;
}

}  // namespace

Status allgather_fds(Bootstrap& bootstrap, const int* mine, std::size_t count, int* all, FdPassing method,
                     FdPassing* used) {
  const int n = bootstrap.size();
  const int rank = bootstrap.rank();
  Offer offer{};
  offer.pid = static_cast<std::int32_t>(getpid());
  offer.count = static_cast<std::uint32_t>(count);
  if (rank == 0 && getrandom(&offer.nonce, sizeof(offer.nonce), 0) != sizeof(offer.nonce))
    offer.nonce = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  offer.use_pidfd = method == FdPassing::kPidfd || (method == FdPassing::kAuto && !pidfd_failed.load());
  // One allgather carries the offer and the descriptor numbers.
  const std::size_t bytes = sizeof(Offer) + count * sizeof(std::int32_t);
  std::vector<char> message(bytes), gathered(bytes * n);
  std::memcpy(message.data(), &offer, sizeof(offer));
  for (std::size_t i = 0; i < count; ++i) {
    const std::int32_t number = mine[i];
    std::memcpy(message.data() + sizeof(Offer) + i * sizeof(number), &number, sizeof(number));
  }
  FERRY_CHECK(bootstrap.allgather(message.data(), gathered.data(), bytes));
  std::vector<Offer> offers(n);
  std::vector<std::int32_t> numbers(n * count);
  bool pidfd_everywhere = true;
  for (int q = 0; q < n; ++q) {
    std::memcpy(&offers[q], gathered.data() + q * bytes, sizeof(Offer));
    std::memcpy(numbers.data() + q * count, gathered.data() + q * bytes + sizeof(Offer), count * sizeof(std::int32_t));
    if (offers[q].count != count) {
      FERRY_WARN(Transport, "fd passing: rank %d offers %u descriptors, rank %d %zu", q, offers[q].count, rank, count);
      return Status::kInvalidArgument;  // every rank sees the same counts, so every rank returns this
    }
    pidfd_everywhere = pidfd_everywhere && offers[q].use_pidfd;
  }
  if (count == 0) return Status::kOk;

  if (pidfd_everywhere) {
    const bool taken = take_with_pidfd(rank, offers, numbers, count, all);
    bool everyone = false;
    const Status status = agree(bootstrap, taken, &everyone);
    if (ok(status) && everyone) {
      if (used) *used = FdPassing::kPidfd;
      FERRY_TRACE(Transport, "fd passing: %zu descriptors from each of %d ranks by pidfd_getfd", count, n);
      return Status::kOk;
    }
    if (taken) {
      std::vector<int> mine_taken(all, all + n * count);
      close_all(mine_taken);
    } else {
      pidfd_failed.store(true);
    }
    FERRY_CHECK(status);
    if (method == FdPassing::kPidfd) return Status::kUnavailable;
    FERRY_INFO(Transport, "fd passing: pidfd_getfd failed on some rank; passing descriptors over sockets");
  } else if (method == FdPassing::kPidfd) {
    return Status::kUnavailable;  // some rank's process already found pidfd unusable
  }
  FERRY_CHECK(exchange_over_sockets(bootstrap, offers, mine, count, all));
  if (used) *used = FdPassing::kSocket;
  FERRY_TRACE(Transport, "fd passing: %zu descriptors from each of %d ranks over sockets", count, n);
  return Status::kOk;
}

}  // namespace ferry
