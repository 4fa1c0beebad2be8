// N ranks as processes of one machine over the TCP bootstrap (real sockets):
// this process is rank 0 and forks the others. Each rank's body returns ""
// or what went wrong; a forked rank prints that to stderr and exits nonzero.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/bootstrap/tcp_bootstrap.h"

namespace ferry::testing {

// Fork before anything starts a GPU runtime: a child cannot use its parent's.
// Returns one line per rank: "" when it succeeded, else what it reported.
inline std::vector<std::string> run_rank_processes(int size,
                                                   const std::function<std::string(int, Bootstrap&)>& body,
                                                   std::int64_t timeout_s = 30) {
  std::vector<std::string> results(size);
  TcpBootstrapOptions options;
  options.loopback = true;
  options.timeout_s = timeout_s;
  std::string id;
  if (create_unique_id(&id, options) != Status::kOk) {
    results[0] = "create_unique_id failed";
    return results;
  }
  std::vector<pid_t> children;
  for (int r = 1; r < size; ++r) {
    const pid_t child = fork();
    if (child < 0) {
      results[r] = "fork failed";
      continue;
    }
    if (child == 0) {
      std::unique_ptr<Bootstrap> bootstrap;
      std::string failure = "make_tcp_bootstrap failed";
      if (make_tcp_bootstrap(id, r, size, &bootstrap, options) == Status::kOk) failure = body(r, *bootstrap);
      if (!failure.empty()) std::fprintf(stderr, "rank %d: %s\n", r, failure.c_str());
      bootstrap.reset();
      _exit(failure.empty() ? 0 : 1);
    }
    children.push_back(child);
  }
  std::unique_ptr<Bootstrap> bootstrap;
  if (make_tcp_bootstrap(id, 0, size, &bootstrap, options) == Status::kOk) {
    results[0] = body(0, *bootstrap);
  } else {
    results[0] = "make_tcp_bootstrap failed";
  }
  bootstrap.reset();
  for (int r = 1; r <= static_cast<int>(children.size()); ++r) {
    int status = 0;
    if (waitpid(children[r - 1], &status, 0) != children[r - 1] || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      results[r] = "rank " + std::to_string(r) + " process failed (status " + std::to_string(status) +
                   ", its stderr says why)";
  }
  return results;
}

}  // namespace ferry::testing
