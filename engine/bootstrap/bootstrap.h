// Out-of-band exchange between the ranks of an engine communicator, used at
// set-up and for per-call handshakes. Implementations: over the
// application's MPI (mpi_bootstrap.h), an authenticated TCP root
// (tcp_bootstrap.h) and the launcher's PMIx server (pmix_bootstrap.h, built
// when PMIx is found: FERRY_HAVE_PMIX).
#pragma once

#include <cstddef>

#include "engine/common/status.h"

namespace ferry {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank contributes bytes at mine; all receive size() * bytes, in rank order.
  virtual Status allgather(const void* mine, void* all, std::size_t bytes) = 0;
  virtual Status barrier() = 0;
};

}  // namespace ferry
