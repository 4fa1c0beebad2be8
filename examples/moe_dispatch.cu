// Mixture-of-experts token dispatch with GPU-initiated puts on an MPI window.
//
// Every rank holds `tokens` tokens of `hidden` floats and hosts
// `experts_per_rank` experts. Each token goes to its top-k experts. The
// dispatch kernel (one block per token) claims a slot in each chosen
// expert's rank with a remote fetch-and-add, puts the token there, and a
// second kernel signals each chosen rank with the number of tokens it sent;
// ranks no token of this rank chose are never touched. Receivers wait for
// the signals they expect, then every slot is checked against the senders'
// tokens. Plain MPI around it: the window is MPI_Win_allocate'd device
// memory, the handle comes from ferry_win_device_handle.
//
//   mpirun -np 2 -x LD_PRELOAD=libferry.so ferry-moe-dispatch [tokens hidden]
//
// The same program runs across machines (or virtual nodes: FERRY_HOSTNAME
// per rank), where the device API reaches the other machines' ranks
// through the GDA queue.
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <vector>

#include "ferry/device.h"

namespace fd = ferry::device;

namespace {

constexpr int kTopK = 2;
constexpr int kExpertsPerRank = 4;
constexpr std::size_t kCounter = 0;        // slots claimed at this rank
constexpr std::size_t kSignals = 64;       // one word per source rank
constexpr std::size_t kMetaBytes = 16;     // source, token, expert, unused

struct Layout {
  int ranks, tokens, hidden;
  __host__ __device__ std::size_t slot_bytes() const { return kMetaBytes + std::size_t(hidden) * sizeof(float); }
  __host__ __device__ std::size_t slots_offset() const { return (kSignals + 8 * std::size_t(ranks) + 255) / 256 * 256; }
  __host__ __device__ std::size_t capacity() const { return std::size_t(ranks) * tokens * kTopK; }
  __host__ __device__ std::size_t window_bytes() const { return slots_offset() + capacity() * slot_bytes(); }
};

// The experts token t of rank `source` goes to: two distinct experts on the
// source's own rank or the next one, so with more than two ranks most ranks
// receive nothing from a given source.
__host__ __device__ int expert_of(int source, int token, int choice, int ranks) {
  const unsigned h = (source * 2654435761u) ^ (token * 40503u) ^ 0x9e37u;
  const int reach = ranks < 2 ? 1 : 2;
  const int first = int(h % unsigned(kExpertsPerRank * reach));
  const int e = choice == 0 ? first : (first + 1 + int((h >> 8) % unsigned(kExpertsPerRank * reach - 1))) %
                                          (kExpertsPerRank * reach);
  const int target = (source + e / kExpertsPerRank) % ranks;
  return target * kExpertsPerRank + e % kExpertsPerRank;
}

__host__ __device__ float token_value(int source, int token, int h) {
  return float((source * 7919 + token * 131 + h) % 1000) * 0.25f;
}

__global__ void make_tokens(float* tokens, int count, int hidden, int rank) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count * hidden; i += gridDim.x * blockDim.x)
    tokens[i] = token_value(rank, i / hidden, i % hidden);
}

// One block per token: claim a slot at each chosen rank, put the token there.
__global__ void dispatch(ferry_window_device_t w, Layout layout, const float* tokens, unsigned* sent_to) {
  const int token = blockIdx.x;
  __shared__ unsigned long long slot;
  for (int choice = 0; choice < kTopK; ++choice) {
    const int expert = expert_of(w.rank, token, choice, layout.ranks);
    const int target = expert / kExpertsPerRank;
    if (threadIdx.x == 0) {
      slot = fd::fetch_add<unsigned long long>(w, target, kCounter, 1ULL);
      atomicAdd(&sent_to[target], 1u);
    }
    __syncthreads();
    const std::size_t at = layout.slots_offset() + slot * layout.slot_bytes();
    fd::put_block(w, target, at + kMetaBytes, tokens + std::size_t(token) * layout.hidden,
                  std::size_t(layout.hidden) * sizeof(float));
    if (threadIdx.x == 0) {
      fd::p<int>(w, target, at, w.rank);
      fd::p<int>(w, target, at + 4, token);
      fd::p<int>(w, target, at + 8, expert);
    }
    __syncthreads();
  }
  fd::quiet();
}

// After dispatch (stream order): tell each chosen rank how many tokens came.
__global__ void signal_targets(ferry_window_device_t w, const unsigned* sent_to) {
  const int target = threadIdx.x;
  if (target < w.size && sent_to[target] > 0)
    fd::signal(w, target, kSignals + 8 * std::size_t(w.rank), sent_to[target], fd::SignalOp::kSet);
}

__global__ void wait_for(ferry_window_device_t w, const unsigned* expected) {
  const int source = threadIdx.x;
  if (source < w.size && expected[source] > 0)
    fd::wait_until(w, kSignals + 8 * std::size_t(source), fd::Compare::kEq, expected[source]);
}

void cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(error));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Layout layout{ranks, argc > 1 ? std::atoi(argv[1]) : 2048, argc > 2 ? std::atoi(argv[2]) : 2048};

  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  void* base = nullptr;
  MPI_Win win;
  if (MPI_Win_allocate(MPI_Aint(layout.window_bytes()), 1, info, MPI_COMM_WORLD, &base, &win) != MPI_SUCCESS)
    MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Info_free(&info);
  ferry_window_device_t w{};
  if (ferry_win_device_handle(win, &w) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);

  float* tokens = nullptr;
  unsigned *sent_to = nullptr, *expected_device = nullptr;
  cuda(cudaMalloc(&tokens, std::size_t(layout.tokens) * layout.hidden * sizeof(float)), "malloc tokens");
  cuda(cudaMalloc(&sent_to, ranks * sizeof(unsigned)), "malloc sent_to");
  cuda(cudaMalloc(&expected_device, ranks * sizeof(unsigned)), "malloc expected");
  make_tokens<<<256, 256>>>(tokens, layout.tokens, layout.hidden, rank);

  // What this rank must receive, from the routing every rank can compute.
  std::vector<unsigned> expected(ranks, 0);
  std::map<std::tuple<int, int, int>, int> wanted;  // (source, token, expert) -> copies
  for (int s = 0; s < ranks; ++s)
    for (int t = 0; t < layout.tokens; ++t)
      for (int c = 0; c < kTopK; ++c) {
        const int e = expert_of(s, t, c, ranks);
        if (e / kExpertsPerRank != rank) continue;
        ++expected[s];
        ++wanted[{s, t, e}];
      }
  cuda(cudaMemcpy(expected_device, expected.data(), ranks * sizeof(unsigned), cudaMemcpyHostToDevice), "expected");

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times_us;
  const int iterations = 20;
  for (int it = 0; it < iterations; ++it) {
    cuda(cudaMemset(base, 0, layout.slots_offset()), "reset counters");
    cuda(cudaMemset(sent_to, 0, ranks * sizeof(unsigned)), "reset sent_to");
    cuda(cudaDeviceSynchronize(), "reset");
    MPI_Barrier(MPI_COMM_WORLD);
    cudaEventRecord(start);
    dispatch<<<layout.tokens, 256>>>(w, layout, tokens, sent_to);
    signal_targets<<<1, 32 * ((ranks + 31) / 32)>>>(w, sent_to);
    wait_for<<<1, 32 * ((ranks + 31) / 32)>>>(w, expected_device);
    cudaEventRecord(stop);
    cuda(cudaEventSynchronize(stop), "dispatch");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times_us.push_back(ms * 1e3f);
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // Check the last iteration's slots.
  int errors = 0;
  unsigned long long claimed = 0;
  cuda(cudaMemcpy(&claimed, base, sizeof(claimed), cudaMemcpyDeviceToHost), "counter");
  unsigned long long total_expected = 0;
  for (unsigned e : expected) total_expected += e;
  if (claimed != total_expected) ++errors;
  std::vector<char> slots(claimed * layout.slot_bytes());
  if (claimed)
    cuda(cudaMemcpy(slots.data(), static_cast<char*>(base) + layout.slots_offset(), slots.size(),
                    cudaMemcpyDeviceToHost),
         "slots");
  for (unsigned long long i = 0; i < claimed && !errors; ++i) {
    const char* slot = slots.data() + i * layout.slot_bytes();
    const int* meta = reinterpret_cast<const int*>(slot);
    auto it = wanted.find({meta[0], meta[1], meta[2]});
    if (it == wanted.end() || it->second == 0) {
      ++errors;
      break;
    }
    --it->second;
    const float* data = reinterpret_cast<const float*>(slot + kMetaBytes);
    for (int h = 0; h < layout.hidden; ++h)
      if (data[h] != token_value(meta[0], meta[1], h)) {
        ++errors;
        break;
      }
  }
  int total_errors = 0;
  MPI_Allreduce(&errors, &total_errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

  std::sort(times_us.begin(), times_us.end());
  const double median_us = times_us[times_us.size() / 2];
  double slowest = 0;
  MPI_Reduce(&median_us, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double sent_bytes = double(layout.tokens) * kTopK * layout.hidden * sizeof(float);
    std::printf("moe dispatch: %d ranks, %d tokens x %d floats per rank, top-%d of %d experts\n", ranks,
                layout.tokens, layout.hidden, kTopK, kExpertsPerRank * ranks);
    // Tokens for the rank's own experts move within its GPU; the rest over
    // peer memory, or through the GDA queue to ranks on other machines.
    std::printf("  dispatch + signal + receive: %.1f us (median of %d, slowest rank), %.1f GB/s of tokens per rank"
                " (local and remote experts%s)\n",
                slowest, iterations, sent_bytes / slowest / 1e3,
                w.gda_ring ? "; ranks on other machines through the GDA queue" : "");
    std::printf(total_errors ? "  WRONG: %d ranks found bad slots\n" : "  every slot verified\nNo Errors\n", total_errors);
  }
  cudaFree(tokens);
  cudaFree(sent_to);
  cudaFree(expected_device);
  MPI_Win_free(&win);
  MPI_Finalize();
  return total_errors ? 1 : 0;
}
