#include "ferry_bench_nccl_method.h"

#include <mpi.h>

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <vector>

#include "ferry_bench_cuda.h"
#include "ferry_bench_nccl.h"
#include "ferry_bench_ops.h"

namespace ferry_bench {
namespace {

class NcclMethod final : public Method {
 public:
  NcclMethod(const nccl::Api& api, nccl::Comm comm, cuda::Stream stream, Buffers device, int nranks)
      : api_(api), comm_(comm), stream_(stream), device_(device), nranks_(nranks) {}
  ~NcclMethod() override {
    api_.comm_destroy(comm_);
    cuda::destroy_stream(stream_);
  }
  NcclMethod(const NcclMethod&) = delete;
  NcclMethod& operator=(const NcclMethod&) = delete;

  void start(const Case& c) override {
    switch (c.op) {
      case Op::kAllreduce:
        check(api_.all_reduce(device_.send, device_.recv, c.count, nccl::kFloat32, nccl::kSum, comm_, stream_),
              "ncclAllReduce");
        break;
      case Op::kBcast:
        check(api_.broadcast(device_.send, device_.send, c.count, nccl::kFloat32, kRoot, comm_, stream_),
              "ncclBroadcast");
        break;
      case Op::kAlltoallv:
        check(api_.group_start(), "ncclGroupStart");
        for (int peer = 0; peer < nranks_; ++peer) {
          check(api_.send(device_.send + c.displs[peer], c.counts[peer], nccl::kFloat32, peer, comm_, stream_),
                "ncclSend");
          check(api_.recv(device_.recv + c.displs[peer], c.counts[peer], nccl::kFloat32, peer, comm_, stream_),
                "ncclRecv");
        }
        check(api_.group_end(), "ncclGroupEnd");
        break;
      case Op::kSendrecv:
      case Op::kIsendrecv:
      case Op::kPsendrecv: {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        check(api_.group_start(), "ncclGroupStart");
        check(api_.send(device_.send, c.count, nccl::kFloat32, next_rank(rank, nranks_), comm_, stream_), "ncclSend");
        check(api_.recv(device_.recv, c.count, nccl::kFloat32, previous_rank(rank, nranks_), comm_, stream_),
              "ncclRecv");
        check(api_.group_end(), "ncclGroupEnd");
        break;
      }
      case Op::kSend: {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        const int partner = send_partner(rank, nranks_);
        if (partner == MPI_PROC_NULL) break;
        if (rank % 2 == 0) {
          check(api_.send(device_.send, c.count, nccl::kFloat32, partner, comm_, stream_), "ncclSend");
        } else {
          check(api_.recv(device_.recv, c.count, nccl::kFloat32, partner, comm_, stream_), "ncclRecv");
        }
        break;
      }
    }
  }
  void finish() override { cuda::synchronize(stream_); }
  std::optional<cuda::Stream> event_stream() const override { return stream_; }

 private:
  void check(nccl::Result result, const char* what) const {
    if (result != nccl::kSuccess) throw std::runtime_error(std::string(what) + ": " + api_.get_error_string(result));
  }

  nccl::Api api_;
  nccl::Comm comm_;
  cuda::Stream stream_;
  Buffers device_;
  int nranks_;
};

}  // namespace

std::unique_ptr<Method> start_nccl(const Options& options, Buffers device, int rank, int nranks, std::string* note) {
  // NVLink multicast stays off on the shared GPU machine; NCCL reads this at
  // init, and it overrides whatever the caller's environment said.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (options.nccl_socket) {
    // NCCL between nodes as its socket transport alone, the baseline for
    // Ferry's net transport across (virtual) nodes.
    setenv("NCCL_P2P_DISABLE", "1", 1);
    setenv("NCCL_SHM_DISABLE", "1", 1);
    setenv("NCCL_NET", "Socket", 1);
  }

  std::vector<std::string> candidates;
  if (!options.nccl_path.empty()) candidates.push_back(options.nccl_path);
  candidates.push_back("libnccl.so.2");
  nccl::Library library;
  std::string why;
  int loaded = nccl::load(candidates, &library, &why) ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &loaded, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  if (!loaded) {
    *note = "nccl column skipped: " + (why.empty() ? "NCCL did not load on every rank" : why);
    return nullptr;
  }
  const nccl::Api& api = library.api;

  struct {
    nccl::Result result;
    nccl::UniqueId id;
  } unique{};
  if (rank == kRoot) unique.result = api.get_unique_id(&unique.id);
  check_mpi(MPI_Bcast(&unique, sizeof unique, MPI_BYTE, kRoot, MPI_COMM_WORLD), "MPI_Bcast");
  if (unique.result != nccl::kSuccess) {
    *note = std::string("nccl column skipped: ncclGetUniqueId: ") + api.get_error_string(unique.result);
    return nullptr;
  }

  const cuda::Stream stream = cuda::create_stream();
  nccl::Comm comm = nullptr;
  const nccl::Result result = api.comm_init_rank(&comm, nranks, unique.id, rank);
  int joined = result == nccl::kSuccess ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &joined, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  if (!joined) {
    if (result == nccl::kSuccess) api.comm_destroy(comm);
    cuda::destroy_stream(stream);
    *note = std::string("nccl column skipped: ncclCommInitRank: ") +
            (result == nccl::kSuccess ? "failed on another rank" : api.get_error_string(result));
    return nullptr;
  }

  int version = 0;
  api.get_version(&version);
  *note = "nccl: NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
          std::to_string(version % 100) + " from " + library.path + ", NCCL_NVLS_ENABLE=0" +
          (options.nccl_socket ? ", its socket transport alone (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket)"
                               : "");
  return std::make_unique<NcclMethod>(api, comm, stream, device, nranks);
}

}  // namespace ferry_bench
