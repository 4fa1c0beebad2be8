// poll-interference: what waiting kernels cost a host thread's small
// copies (the GDA proxy's work while kernels wait on it). `blocks` blocks
// of 256 threads wait, thread 0 of each polling a word, while the host
// times 8-byte cudaMemcpyAsync + stream sync, device to pinned host and
// back, on a stream of its own; median of 100 each. Ways of waiting: a
// word of pinned host memory (with __nanosleep(64), busy, or
// __nanosleep(1000) between polls), a word of device memory (with
// __nanosleep(64), or busy), and sleeping without polling.
//
//   build/bench/poll-interference
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

enum Wait { kHostNap64, kHostBusy, kHostNap1000, kDeviceNap64, kDeviceBusy, kSleepOnly, kWaits };
const char* const kWaitNames[kWaits] = {"host word, nanosleep 64", "host word, busy", "host word, nanosleep 1000",
                                        "device word, nanosleep 64", "device word, busy", "sleep, no polls"};

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void waiters(volatile unsigned long long* host_word, volatile unsigned long long* device_word, int wait,
                        unsigned long long sleep_ns) {
  if (threadIdx.x == 0) {
    const unsigned long long start = now_ns();
    switch (wait) {
      case kHostNap64: while (*host_word == 0) __nanosleep(64); break;
      case kHostBusy: while (*host_word == 0) {} break;
      case kHostNap1000: while (*host_word == 0) __nanosleep(1000); break;
      case kDeviceNap64: while (*device_word == 0) __nanosleep(64); break;
      case kDeviceBusy: while (*device_word == 0) {} break;
      default: while (now_ns() - start < sleep_ns) __nanosleep(1000); break;
    }
  }
  __syncthreads();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "poll-interference: %s: %s\n", what, cudaGetErrorString(error));
  return false;
}

}  // namespace

int main() {
  unsigned long long *host_word = nullptr, *pinned = nullptr, *device = nullptr, *device_word = nullptr;
  if (!cuda(cudaHostAlloc(&host_word, 8, cudaHostAllocMapped), "cudaHostAlloc") ||
      !cuda(cudaHostAlloc(&pinned, 8, cudaHostAllocDefault), "cudaHostAlloc") ||
      !cuda(cudaMalloc(&device, 8), "cudaMalloc") || !cuda(cudaMalloc(&device_word, 8), "cudaMalloc"))
    return 1;
  cudaStream_t copies, kernels;
  cudaStreamCreateWithFlags(&copies, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&kernels, cudaStreamNonBlocking);
  const unsigned long long zero = 0, one = 1;
  std::printf("# 8-byte cudaMemcpyAsync + cudaStreamSynchronize while blocks wait; us, median of 100\n");
  std::printf("%-27s %7s %10s %10s\n", "waiting on", "blocks", "D2H us", "H2D us");
  for (int wait = 0; wait < kWaits; ++wait)
    for (int blocks : {0, 16, 64, 132, 264, 512}) {
      *host_word = 0;
      cudaMemcpy(device_word, &zero, 8, cudaMemcpyHostToDevice);
      if (blocks) waiters<<<blocks, 256, 0, kernels>>>(host_word, device_word, wait, 4000000000ull);
      std::vector<double> d2h, h2d;
      auto timed = [&](void* dst, const void* src, cudaMemcpyKind kind, std::vector<double>& out) {
        const auto start = std::chrono::steady_clock::now();
        cudaMemcpyAsync(dst, src, 8, kind, copies);
        cudaStreamSynchronize(copies);
        out.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      };
      for (int i = 0; i < 100; ++i) {
        timed(pinned, device, cudaMemcpyDeviceToHost, d2h);
        timed(device, pinned, cudaMemcpyHostToDevice, h2d);
      }
      *host_word = 1;
      cudaMemcpyAsync(device_word, &one, 8, cudaMemcpyHostToDevice, copies);
      if (!cuda(cudaDeviceSynchronize(), "waiters")) return 1;
      std::printf("%-27s %7d %10.1f %10.1f\n", kWaitNames[wait], blocks, median(d2h), median(h2d));
    }
  return 0;
}
