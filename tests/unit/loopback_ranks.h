// Ranks as threads of one test process, over a loopback TCP bootstrap of
// their own, for the network providers' tests; and the wait for one of a
// provider's requests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/bootstrap/tcp_bootstrap.h"
#include "engine/transport/net.h"

namespace ferry::testing {

// Runs body(rank, bootstrap) for every rank of a fresh bootstrap, each on
// its own thread, and joins them.
inline void run_loopback_ranks(int size, const std::function<void(int, Bootstrap&)>& body) {
  TcpBootstrapOptions options;
  options.timeout_s = 10;
  options.loopback = true;
  std::string id;
  ASSERT_EQ(create_unique_id(&id, options), Status::kOk);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      std::unique_ptr<Bootstrap> bootstrap;
      ASSERT_EQ(make_tcp_bootstrap(id, rank, size, &bootstrap, options), Status::kOk);
      body(rank, *bootstrap);
    });
  for (auto& t : threads) t.join();
}

// test() until done; the status that ended it (kTimeout after 10 s).
inline Status wait_request(NetProvider& net, NetRequest* request) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    bool done = false;
    const Status status = net.test(request, &done);
    if (!ok(status) || done) return status;
  }
  return Status::kTimeout;
}

}  // namespace ferry::testing
