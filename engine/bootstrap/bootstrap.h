// Out-of-band exchange between the ranks of an engine communicator, used at
// set-up and for per-call handshakes. Implementations: over the
// application's MPI (mpi_bootstrap.h), an authenticated TCP root
// (tcp_bootstrap.h) and the launcher's PMIx server (pmix_bootstrap.h, built
// when PMIx is found: FERRY_HAVE_PMIX).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine/common/liveness.h"
#include "engine/common/status.h"
#include "engine/transport/net.h"

namespace ferry {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank contributes bytes at mine; all receive size() * bytes, in rank order.
  virtual Status allgather(const void* mine, void* all, std::size_t bytes) = 0;
  virtual Status barrier() = 0;

  // Collective: a bootstrap over the ranks that passed the same color (none
  // for a negative color: kUnavailable there), ordered by key then rank (MPI_Comm_split's rule). kUnsupported (on
  // every rank) where the implementation cannot divide itself.
  virtual Status split(int color, int key, std::unique_ptr<Bootstrap>* part) { return Status::kUnsupported; }
  // Collective: the network the bootstrap itself brings between its ranks
  // (the MPI bootstrap: the application's MPI), for the net transport's
  // mpi provider; nullptr (on every rank) where it brings none.
  virtual std::unique_ptr<NetProvider> open_network() { return nullptr; }

  // By rank, the pids of the peers on this machine (0 for others): a wait
  // of allgather or barrier then ends in Status::kPeerEnded, soon after
  // one of them has, where the implementation waits in steps (the MPI and
  // shared-memory ones).
  virtual void watch_peers(std::vector<std::int32_t> pids) { liveness_.watch(std::move(pids)); }

 protected:
  // In a wait's loop: kPeerEnded (and the peer noted, liveness.h) once a
  // watched peer's process has ended, else kOk.
  Status check_peers() {
    const int ended = liveness_.ended_rank();
    if (ended < 0) return Status::kOk;
    note_ended_peer(ended, size(), liveness_.pid_of(ended));
    return Status::kPeerEnded;
  }

 private:
  PeerLiveness liveness_;
};

}  // namespace ferry
