// Fuzzes the TCP bootstrap's wire messages over real loopback sockets. The
// first input byte picks who the input plays; the rest is what it sends:
//   even: a stranger connecting to a real root before rank 1 does. The root
//         must turn it away and still form the job with rank 1, whose
//         allgather must then be right.
//   odd:  a root that rank 1 connects to (hello, welcome, then an allgather
//         result). Rank 1 must fail cleanly or, on well-formed frames, form.
// Every input ends with the sender closing its side, so no step may wait
// for a timeout: a run longer than a few seconds is a failure.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "engine/bootstrap/tcp_bootstrap.h"

namespace {

constexpr std::size_t kMaxInput = 4096;  // below a loopback socket's buffer: writing never blocks
constexpr auto kPromptly = std::chrono::seconds(4);

ferry::TcpBootstrapOptions quick_options() {
  ferry::TcpBootstrapOptions options;
  options.timeout_s = 10;
  options.loopback = true;
  return options;
}

// -1 when the machine has no socket or port to spare (long runs use up
// ephemeral ports): that input is skipped, it says nothing about Ferry.
int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends bytes, closes the sending side and reads until the peer closes.
void play(int fd, const std::uint8_t* data, std::size_t size) {
  if (size > 0 && send(fd, data, size, MSG_NOSIGNAL) < 0) {
    // The peer may already have closed: that is its answer.
  }
  shutdown(fd, SHUT_WR);
  char sink[256];
  while (recv(fd, sink, sizeof(sink), 0) > 0) {
  }
  close(fd);
}

int port_of(const std::string& id) {
  const std::size_t second = id.rfind(':');
  const std::size_t first = id.rfind(':', second - 1);
  return std::stoi(id.substr(first + 1, second - first - 1));
}

void stranger_at_root(const std::uint8_t* data, std::size_t size) {
  std::string id;
  // No listener for the root (no port left): skipped, as below.
  if (!ferry::ok(ferry::create_unique_id(&id, quick_options()))) return;
  std::unique_ptr<ferry::Bootstrap> root;
  ferry::Status root_status = ferry::Status::kOk;
  std::thread root_thread([&] { root_status = ferry::make_tcp_bootstrap(id, 0, 2, &root, quick_options()); });
  const int stranger = connect_loopback(port_of(id));
  if (stranger >= 0) play(stranger, data, size);
  std::unique_ptr<ferry::Bootstrap> member;
  const ferry::Status member_status = ferry::make_tcp_bootstrap(id, 1, 2, &member, quick_options());
  root_thread.join();
  if (!ferry::ok(root_status) || !ferry::ok(member_status)) std::abort();
  std::int64_t gathered_at_root[2] = {}, gathered_at_member[2] = {};
  const std::int64_t root_value = 11, member_value = -7;
  std::thread gather([&] {
    if (!ferry::ok(root->allgather(&root_value, gathered_at_root, sizeof(root_value)))) std::abort();
  });
  if (!ferry::ok(member->allgather(&member_value, gathered_at_member, sizeof(member_value)))) std::abort();
  gather.join();
  for (const std::int64_t* all : {gathered_at_root, gathered_at_member})
    if (all[0] != root_value || all[1] != member_value) std::abort();
}

void impostor_root(const std::uint8_t* data, std::size_t size) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  // No listener (no descriptor or port left, late in a long run): the
  // input is skipped, as a stranger that cannot connect is.
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(listener, 4) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (listener >= 0) close(listener);
    return;
  }
  const std::string id = "127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + ":" + std::string(32, 'a');
  std::thread member_thread([&] {
    std::unique_ptr<ferry::Bootstrap> member;
    if (!ferry::ok(ferry::make_tcp_bootstrap(id, 1, 2, &member, quick_options()))) return;
    if (member->rank() != 1 || member->size() != 2) std::abort();
    // What the impostor gathers is its own choice; only failing cleanly counts.
    std::int64_t all[2] = {};
    const std::int64_t mine = 5;
    (void)member->allgather(&mine, all, sizeof(mine));
  });
  const int connection = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (connection < 0) std::abort();
  play(connection, data, size);
  member_thread.join();
  close(listener);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0 || size > kMaxInput) return 0;
  const auto start = std::chrono::steady_clock::now();
  if (data[0] % 2 == 0) {
    stranger_at_root(data + 1, size - 1);
  } else {
    impostor_root(data + 1, size - 1);
  }
  if (std::chrono::steady_clock::now() - start > kPromptly) std::abort();
  return 0;
}
