// The symmetric heap on real GPUs: two processes (this one and a fork), one
// GPU each (cudaSetDevice(rank % count)), over the TCP bootstrap. Each rank
// writes its stripe of every object into every rank's copy with cudaMemcpy
// to the peer's address, then checks its own copy and the peer's. Once with
// the descriptors passed by pidfd_getfd, once over Unix sockets. No kernels.
// Prints one line per heap; exits nonzero on any failure.
//
//   symmetric_heap_cuda_test [ranks]   (default 2)
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/pgas/symmetric_heap.h"
#include "tests/unit/process_ranks.h"

namespace ferry {
namespace {

unsigned char pattern(int object, int writer, int target, std::size_t j) {
  return static_cast<unsigned char>(object * 131 + writer * 31 + target * 7 + j * 13);
}

int writer_of(std::size_t j, std::size_t bytes, int n) {
  int w = static_cast<int>(j * n / bytes);
  while (bytes * (w + 1) / n <= j) ++w;
  while (bytes * w / n > j) --w;
  return w;
}

std::string scenario(int rank, Bootstrap& bootstrap, FdPassing method) {
  const int n = bootstrap.size();
  std::string failure;
  auto check = [&](bool condition, const std::string& what) {
    if (!condition && failure.empty()) failure = what;
  };
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return "no CUDA device";
  if (cudaSetDevice(rank % count) != cudaSuccess) return "cudaSetDevice";
  gpu::Backend* device = gpu::cuda_backend();
  if (!device) return "no CUDA backend";

  SymmetricHeap::Options options;
  options.fd_passing = method;
  std::unique_ptr<SymmetricHeap> heap;
  const std::size_t per_rank = std::size_t{64} << 20;
  Status status = SymmetricHeap::create(bootstrap, device, per_rank, &heap, options);
  if (status != Status::kOk) return std::string("create: ") + status_name(status);

  // Odd sizes; the second crosses a chunk boundary (chunks are 2 MiB on H200).
  const std::vector<std::size_t> sizes = {1, (std::size_t{3} << 20) + 5, 1000003, 3};
  std::vector<char*> objects;
  for (std::size_t s : sizes) {
    void* p = nullptr;
    status = heap->allocate(s, &p);
    if (status != Status::kOk) return std::string("allocate: ") + status_name(status);
    objects.push_back(static_cast<char*>(p));
  }
  std::vector<std::uint64_t> offsets, everyone(n * sizes.size());
  for (char* p : objects) offsets.push_back(heap->offset_of(p));
  if (bootstrap.allgather(offsets.data(), everyone.data(), offsets.size() * 8) != Status::kOk) return "allgather";
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < sizes.size(); ++i)
      check(everyone[r * sizes.size() + i] == offsets[i], "offsets differ between ranks");

  for (std::size_t i = 0; i < objects.size(); ++i) {
    for (int r = 0; r < n; ++r) {
      const gpu::PointerInfo info = gpu::classify(heap->peer_address(objects[i], r));
      check(info.kind == gpu::MemoryKind::kDevice && info.owner == gpu::BackendKind::kCuda,
            "rank " + std::to_string(r) + "'s copy is not CUDA device memory");
      // Each rank's copy lives on that rank's GPU: the slots are not mixed up.
      check(info.device == r % count, "rank " + std::to_string(r) + "'s copy is on device " +
                                          std::to_string(info.device));
      if (i == 1 && rank == 0)
        std::printf("classify(rank %d's object 1): device %d, base %+lld from heap base, size %zu, allocation id %llu\n",
                    r, info.device, static_cast<long long>(info.base - reinterpret_cast<std::uintptr_t>(heap->base())),
                    info.size, static_cast<unsigned long long>(info.allocation_id));
    }
  }

  check(gpu::classify(static_cast<char*>(heap->peer_address(heap->base(), rank)) + heap->mapped_bytes()).kind ==
            gpu::MemoryKind::kHost,
        "the unmapped part of the heap reads as device memory");
  for (std::size_t i = 0; i < objects.size(); ++i) {
    const std::size_t lo = sizes[i] * rank / n, hi = sizes[i] * (rank + 1) / n;
    for (int t = 0; t < n; ++t) {
      std::vector<unsigned char> stripe(hi - lo);
      for (std::size_t j = lo; j < hi; ++j) stripe[j - lo] = pattern(static_cast<int>(i), rank, t, j);
      check(device->copy(static_cast<char*>(heap->peer_address(objects[i], t)) + lo, stripe.data(), stripe.size()) ==
                Status::kOk,
            "copy into rank " + std::to_string(t));
    }
  }
  check(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
  if (bootstrap.barrier() != Status::kOk) return "barrier";
  for (std::size_t i = 0; i < objects.size(); ++i) {
    for (int t = 0; t < n; ++t) {
      std::vector<unsigned char> seen(sizes[i]);
      check(device->copy(seen.data(), heap->peer_address(objects[i], t), sizes[i]) == Status::kOk, "copy out");
      for (std::size_t j = 0; j < sizes[i]; ++j) {
        if (seen[j] != pattern(static_cast<int>(i), writer_of(j, sizes[i], n), t, j)) {
          check(false, "object " + std::to_string(i) + " on rank " + std::to_string(t) + ": wrong byte at " +
                           std::to_string(j));
          break;
        }
      }
    }
  }
  if (bootstrap.barrier() != Status::kOk) return "barrier";

  void* p = nullptr;
  const std::size_t reused = heap->offset_of(objects[2]);
  check(heap->free(objects[2]) == Status::kOk, "free");
  check(heap->allocate(1000000, &p) == Status::kOk && heap->offset_of(p) == reused, "reuse of a freed object");
  const std::size_t mapped = heap->mapped_bytes();
  check(heap->allocate(per_rank, &p) == Status::kOutOfMemory && heap->mapped_bytes() == mapped, "out of heap");
  if (rank == 0)
    std::printf("heap over %s: %d ranks, %zu bytes mapped per rank in chunks of %zu: %s\n",
                fd_passing_name(heap->fd_passing_used()), n, heap->mapped_bytes(), heap->chunk_bytes(),
                failure.empty() ? "ok" : failure.c_str());
  heap.reset();
  if (bootstrap.barrier() != Status::kOk) return "barrier";
  return failure;
}

}  // namespace
}  // namespace ferry

// One heap, in a process of its own: after CUDA starts in a process, its
// forks cannot use CUDA, so each round's rank 0 is a fresh fork too.
int run_round(int ranks, ferry::FdPassing method) {
  const pid_t round = fork();
  if (round < 0) return 1;
  if (round == 0) {
    const auto results = ferry::testing::run_rank_processes(ranks, [method](int rank, ferry::Bootstrap& bootstrap) {
      return ferry::scenario(rank, bootstrap, method);
    });
    int failures = 0;
    for (std::size_t r = 0; r < results.size(); ++r) {
      if (results[r].empty()) continue;
      std::fprintf(stderr, "symmetric heap over %s, rank %zu: %s\n", ferry::fd_passing_name(method), r,
                   results[r].c_str());
      ++failures;
    }
    std::fflush(stdout);
    _exit(failures ? 1 : 0);
  }
  int status = 0;
  return waitpid(round, &status, 0) == round && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  int failures = 0;
  for (ferry::FdPassing method : {ferry::FdPassing::kPidfd, ferry::FdPassing::kSocket})
    failures += run_round(ranks, method);
  std::printf("symmetric_heap_cuda_test: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
