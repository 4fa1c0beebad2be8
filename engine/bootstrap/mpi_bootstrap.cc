#include "engine/bootstrap/mpi_bootstrap.h"

#include <chrono>
#include <cstring>

#include "engine/bootstrap/mpi_network.h"
#include "engine/common/params.h"

namespace ferry {
namespace {

class MpiBootstrap final : public Bootstrap {
 public:
  MpiBootstrap(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~MpiBootstrap() override { free_private_comm(&comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allgather(const void* mine, void* all, std::size_t bytes) override {
    // Alone there is no one to ask (an MPI call per engine call otherwise).
    if (size_ == 1) {
      if (bytes > 0) std::memcpy(all, mine, bytes);
      return Status::kOk;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    if (PMPI_Iallgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, comm_,
                        &request) != MPI_SUCCESS)
      return Status::kSystemError;
    return wait(&request, "allgather");
  }

  Status split(int color, int key, std::unique_ptr<Bootstrap>* part) override;

  std::unique_ptr<NetProvider> open_network() override { return make_mpi_network(comm_); }

  Status barrier() override {
    if (size_ == 1) return Status::kOk;
    MPI_Request request = MPI_REQUEST_NULL;
    if (PMPI_Ibarrier(comm_, &request) != MPI_SUCCESS) return Status::kSystemError;
    return wait(&request, "barrier");
  }

 private:
  // A peer that never arrives (one that took another route, or hung) must
  // end in an error, not a silent hang: wait at most FERRY_HANDSHAKE_TIMEOUT.
  Status wait(MPI_Request* request, const char* what) {
    const auto limit = std::chrono::seconds(params().handshake_timeout);
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      int done = 0;
      if (PMPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return Status::kSystemError;
      if (done) return Status::kOk;
      if (check_peers() != Status::kOk) {
        // The request stays posted: a collective request cannot be cancelled.
        FERRY_WARN(Bootstrap, "%s among %d ranks: %s has ended", what, size_, last_ended_peer().c_str());
        return Status::kPeerEnded;
      }
      if (limit.count() > 0 && std::chrono::steady_clock::now() - start > limit) {
        FERRY_WARN(Bootstrap, "%s among %d ranks did not complete in %lld s (FERRY_HANDSHAKE_TIMEOUT): a peer is "
                   "not in the same call, or took another route", what, size_,
                   static_cast<long long>(limit.count()));
        return Status::kTimeout;
      }
    }
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
};

Status MpiBootstrap::split(int color, int key, std::unique_ptr<Bootstrap>* part) {
  MPI_Comm divided = MPI_COMM_NULL;
  if (PMPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &divided) != MPI_SUCCESS)
    return Status::kSystemError;
  if (divided == MPI_COMM_NULL) return Status::kUnavailable;
  const PrivateComm own = adopt_private_comm(divided);
  *part = std::make_unique<MpiBootstrap>(own.comm, own.rank, own.size);
  return Status::kOk;
}

}  // namespace

std::unique_ptr<Bootstrap> make_mpi_bootstrap(MPI_Comm comm) {
  MPI_Comm dup = MPI_COMM_NULL;
  if (PMPI_Comm_dup(comm, &dup) != MPI_SUCCESS) return nullptr;
  const PrivateComm own = adopt_private_comm(dup);
  return std::make_unique<MpiBootstrap>(own.comm, own.rank, own.size);
}

PrivateComm adopt_private_comm(MPI_Comm comm) {
  PMPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  PrivateComm own{comm, 0, 0};
  PMPI_Comm_rank(comm, &own.rank);
  PMPI_Comm_size(comm, &own.size);
  return own;
}

void free_private_comm(MPI_Comm* comm) {
  int finalized = 0;
  PMPI_Finalized(&finalized);
  if (!finalized) PMPI_Comm_free(comm);
}

}  // namespace ferry
