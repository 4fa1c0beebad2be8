#include "engine/bootstrap/mpi_network.h"

#include <climits>

#include "engine/bootstrap/mpi_bootstrap.h"

namespace ferry {
namespace {

// What a NetRequest holds here.
struct Posted {
  MPI_Request request = MPI_REQUEST_NULL;
  bool receive = false;
};

class MpiNetwork final : public NetProvider {
 public:
  MpiNetwork(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~MpiNetwork() override { free_private_comm(&comm_); }

  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status post_send(int peer, int tag, const void* data, std::size_t bytes, NetRequest* request) override {
    if (!valid(peer, tag, bytes)) return Status::kInvalidArgument;
    auto* posted = new Posted{MPI_REQUEST_NULL, false};
    if (PMPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &posted->request) != MPI_SUCCESS) {
      delete posted;
      return Status::kSystemError;
    }
    request->handle = posted;
    return Status::kOk;
  }

  Status post_recv(int peer, int tag, void* data, std::size_t bytes, NetRequest* request) override {
    if (!valid(peer, tag, bytes)) return Status::kInvalidArgument;
    auto* posted = new Posted{MPI_REQUEST_NULL, true};
    if (PMPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &posted->request) != MPI_SUCCESS) {
      delete posted;
      return Status::kSystemError;
    }
    request->handle = posted;
    return Status::kOk;
  }

  Status test(NetRequest* request, bool* done) override {
    auto* posted = static_cast<Posted*>(request->handle);
    if (!posted) return Status::kInvalidArgument;
    int flag = 0;
    MPI_Status status;
    if (PMPI_Test(&posted->request, &flag, &status) != MPI_SUCCESS) return Status::kSystemError;
    *done = flag != 0;
    if (!flag) return Status::kOk;
    delete posted;
    request->handle = nullptr;
    return Status::kOk;
  }

  void cancel(NetRequest* request) override {
    auto* posted = static_cast<Posted*>(request->handle);
    if (!posted) return;
    // A receive is withdrawn; a send stays with MPI, which completes it
    // when the peer receives (cancelling sends is deprecated in MPI 4).
    if (posted->request != MPI_REQUEST_NULL) {
      if (posted->receive) PMPI_Cancel(&posted->request);
      PMPI_Request_free(&posted->request);
    }
    delete posted;
    request->handle = nullptr;
  }

 private:
  // MPI counts are ints; the net transport sends in chunks well below that.
  bool valid(int peer, int tag, std::size_t bytes) const {
    return peer >= 0 && peer < size_ && peer != rank_ && tag >= 0 && bytes <= static_cast<std::size_t>(INT_MAX);
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
};

}  // namespace

std::unique_ptr<NetProvider> make_mpi_network(MPI_Comm comm) {
  MPI_Comm dup = MPI_COMM_NULL;
  if (PMPI_Comm_dup(comm, &dup) != MPI_SUCCESS) return nullptr;
  const PrivateComm own = adopt_private_comm(dup);
  return std::make_unique<MpiNetwork>(own.comm, own.rank, own.size);
}

}  // namespace ferry
