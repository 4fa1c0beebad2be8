// Standalone bootstrap over TCP, for running the engine without MPI.
//
// Rank 0 (the root) calls create_unique_id, which opens its listening socket,
// and hands the id ("host:port:secret") to the other ranks out of band. Every
// rank then calls make_tcp_bootstrap; the others connect to the root, prove
// they know the secret by a challenge-response (the secret never crosses the
// wire) and join with their rank. allgather and barrier go through the root
// over these authenticated connections: bootstrap traffic is small and
// happens at set-up, so a star is enough.
//
// Address choice: by default the root binds 0.0.0.0 and advertises the host
// name (gethostname), which other machines must be able to resolve; with
// loopback set it binds and advertises 127.0.0.1 (tests, one machine). IPv4
// only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/bootstrap/bootstrap.h"

namespace ferry {

struct TcpBootstrapOptions {
  // Limit for forming the bootstrap and for each allgather or barrier (connect
  // retries included); < 0: FERRY_BOOTSTRAP_TIMEOUT.
  std::int64_t timeout_s = -1;
  bool loopback = false;
  // When set, receives the reason create_unique_id or make_tcp_bootstrap failed
  // (the text also logged at WARN).
  std::string* failure = nullptr;
};

// Root only: starts listening and returns the id to give to every rank.
Status create_unique_id(std::string* id, const TcpBootstrapOptions& options = {});

// Collective over all `size` ranks; rank 0 must be the process that created id.
Status make_tcp_bootstrap(const std::string& id, int rank, int size, std::unique_ptr<Bootstrap>* out,
                          const TcpBootstrapOptions& options = {});

}  // namespace ferry
