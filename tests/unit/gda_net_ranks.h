// What the tests of the proxy GDA over the net transport (gda_net.h) share:
// ranks as threads of one process, each with a window, a network of its own
// (the socket provider on loopback, or the ib provider on the tests'
// software RDMA device), the executor and a proxy with a ring for host
// threads.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/transport/gda/gda_net.h"
#include "engine/transport/socket_network.h"
#if defined(FERRY_HAVE_IBVERBS)
#include "engine/transport/ib_network.h"
#include "tests/unit/soft_verbs.h"
#endif
#include "unit_test_device.h"

namespace ferry::gda {

constexpr std::uint16_t kWindowId = 7;
constexpr std::size_t kWindowBytes = 256 << 10;

inline std::vector<char> pattern(int source, int target, int round, std::size_t bytes) {
  std::vector<char> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(source * 101 + target * 37 + round * 7 + i * 13);
  return data;
}

// The network providers the proxy runs over here: socket on loopback,
// and ib on the tests' software RDMA device where the build has verbs.
enum class Provider { kSocket, kIb };

inline std::string provider_name(const ::testing::TestParamInfo<Provider>& info) {
  return info.param == Provider::kSocket ? "socket" : "ib";
}

inline std::unique_ptr<NetProvider> make_network(Bootstrap& bootstrap, Provider provider) {
  std::unique_ptr<NetProvider> net;
#if defined(FERRY_HAVE_IBVERBS)
  if (provider == Provider::kIb) {
    IbNetworkOptions options;
    options.verbs = &soft_verbs::verbs();
    EXPECT_EQ(make_ib_network(bootstrap, &net, options), Status::kOk);
    return net;
  }
#endif
  (void)provider;
  SocketNetworkOptions options;
  options.ifname = "lo";
  EXPECT_EQ(make_socket_network(bootstrap, &net, options), Status::kOk);
  return net;
}

// Wraps a rank's network (to watch what crosses it).
using NetworkWrapper = std::function<std::unique_ptr<NetProvider>(std::unique_ptr<NetProvider>)>;

// One rank: window memory, a network of its own (the test's Provider), the
// executor and a proxy with a ring for this rank's host threads.
struct GdaRank {
  gpu::Backend* backend = testing::unit_test_device();
  void* window = nullptr;
  std::unique_ptr<GdaNetExecutor> executor;
  std::unique_ptr<GdaProxy> proxy;
  GdaRing ring{};

  explicit GdaRank(Bootstrap& bootstrap, GdaNetExecutor::Combiner combiner = nullptr,
                   const NetworkWrapper& wrap = nullptr) {
    std::unique_ptr<NetProvider> net = make_network(bootstrap, ::testing::WithParamInterface<Provider>::GetParam());
    if (wrap) net = wrap(std::move(net));
    EXPECT_EQ(backend->device_alloc(kWindowBytes, &window), Status::kOk);
    const std::vector<char> zeros(kWindowBytes, 0);
    EXPECT_EQ(backend->copy(window, zeros.data(), kWindowBytes), Status::kOk);
    executor = std::make_unique<GdaNetExecutor>(backend, std::move(net));
    executor->add_window(kWindowId, window, kWindowBytes);
    if (combiner) executor->set_combiner(std::move(combiner));
    proxy = std::make_unique<GdaProxy>(backend, executor.get());
    EXPECT_EQ(proxy->add_ring(8, Producers::kHost, &ring), Status::kOk);
    // Every rank's window is known before any rank posts.
    EXPECT_EQ(bootstrap.barrier(), Status::kOk);
    proxy->start();
  }
  ~GdaRank() {
    proxy.reset();
    executor.reset();
    EXPECT_EQ(backend->device_free(window), Status::kOk);
  }

  // Waits until `requests` from other ranks were applied here (the proxy's
  // writes then visible to this thread), 10 s at most.
  void wait_applied(std::uint64_t requests) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (executor->applied() < requests && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    EXPECT_EQ(executor->applied(), requests);
  }

  std::vector<char> window_bytes() {
    std::vector<char> bytes(kWindowBytes);
    EXPECT_EQ(backend->copy(bytes.data(), window, kWindowBytes), Status::kOk);
    return bytes;
  }
};

inline std::uint64_t word_at(const std::vector<char>& bytes, std::size_t offset) {
  std::uint64_t word = 0;
  std::memcpy(&word, bytes.data() + offset, 8);
  return word;
}

}  // namespace ferry::gda
