// NCCL for ferry-bench, opened with dlopen at run time: the bench neither
// links NCCL nor needs its header. The declarations below follow nccl.h
// (2.28); this part of NCCL's ABI has not changed since ncclSend/ncclRecv
// arrived in 2.7. Include only where FERRY_BENCH_HAVE_CUDA is defined.
#ifndef FERRY_BENCH_NCCL_H
#define FERRY_BENCH_NCCL_H

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace ferry_bench::nccl {

using Result = int;  // ncclResult_t
constexpr Result kSuccess = 0;
constexpr int kFloat32 = 7;  // ncclFloat32
constexpr int kSum = 0;      // ncclSum

struct CommTag;
using Comm = CommTag*;  // ncclComm_t: opaque
struct UniqueId {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
};

// The entry points ferry-bench calls. Enum arguments (data type, reduction
// op) are passed as int, which is how the C ABI passes those enums.
struct Api {
  Result (*get_version)(int* version);
  Result (*get_unique_id)(UniqueId* id);
  Result (*comm_init_rank)(Comm* comm, int nranks, UniqueId id, int rank);
  Result (*comm_destroy)(Comm comm);
  const char* (*get_error_string)(Result result);
  Result (*all_reduce)(const void* send, void* recv, std::size_t count, int datatype, int op, Comm comm,
                       cudaStream_t stream);
  Result (*broadcast)(const void* send, void* recv, std::size_t count, int datatype, int root, Comm comm,
                      cudaStream_t stream);
  Result (*send)(const void* send, std::size_t count, int datatype, int peer, Comm comm, cudaStream_t stream);
  Result (*recv)(void* recv, std::size_t count, int datatype, int peer, Comm comm, cudaStream_t stream);
  Result (*group_start)();
  Result (*group_end)();
};

struct Library {
  std::string path;
  Api api{};
};

// dlsym gives an object pointer; POSIX allows it to be a function pointer.
template <typename Function>
bool resolve(void* handle, const char* name, Function* function) {
  void* symbol = dlsym(handle, name);
  std::memcpy(function, &symbol, sizeof symbol);
  return symbol != nullptr;
}

// Opens the first candidate that loads and has every entry point. On failure
// *why lists each candidate's reason. The library taken is never closed:
// NCCL leaves threads and exit handlers behind that must outlive its use.
inline bool load(const std::vector<std::string>& candidates, Library* library, std::string* why) {
  why->clear();
  for (const std::string& candidate : candidates) {
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      *why += (why->empty() ? "" : "; ") + std::string(dlerror());
      continue;
    }
    Api api{};
    const bool complete =
        resolve(handle, "ncclGetVersion", &api.get_version) && resolve(handle, "ncclGetUniqueId", &api.get_unique_id) &&
        resolve(handle, "ncclCommInitRank", &api.comm_init_rank) &&
        resolve(handle, "ncclCommDestroy", &api.comm_destroy) &&
        resolve(handle, "ncclGetErrorString", &api.get_error_string) &&
        resolve(handle, "ncclAllReduce", &api.all_reduce) && resolve(handle, "ncclBroadcast", &api.broadcast) &&
        resolve(handle, "ncclSend", &api.send) && resolve(handle, "ncclRecv", &api.recv) &&
        resolve(handle, "ncclGroupStart", &api.group_start) && resolve(handle, "ncclGroupEnd", &api.group_end);
    if (!complete) {
      *why += (why->empty() ? "" : "; ") + candidate + ": not an NCCL with ncclSend/ncclRecv";
      dlclose(handle);
      continue;
    }
    library->path = candidate;
    library->api = api;
    return true;
  }
  return false;
}

}  // namespace ferry_bench::nccl

#endif  // FERRY_BENCH_NCCL_H
