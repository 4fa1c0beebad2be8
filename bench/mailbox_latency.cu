// The floors of a blocking call that the engine worker is built around, on
// one GPU, timed with the host clock (median of many): a host -> GPU -> host
// round trip through mapped host memory (a kernel already running polls a
// word, then echoes it), the same when the kernel must then read a 512-byte
// item it was told about, and an empty kernel launch (+ synchronize).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

struct alignas(64) Box {
  std::uint64_t posted;
  std::uint64_t padding0[7];
  std::uint64_t done;
  std::uint64_t padding1[7];
  std::uint64_t item[64];
};

__device__ std::uint64_t load_acquire_sys(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ void store_release_sys(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Echoes each posted number; with read_item, warp 0 first reads the item.
__global__ void echo(Box* box, int rounds, bool read_item, std::uint64_t* sink) {
  for (int i = 1; i <= rounds; ++i) {
    if (threadIdx.x == 0)
      while (load_acquire_sys(&box->posted) < static_cast<std::uint64_t>(i)) {
      }
    __syncthreads();
    if (read_item && threadIdx.x < 32) {
      const volatile std::uint64_t* item = box->item;
      const std::uint64_t sum = item[threadIdx.x] + item[threadIdx.x + 32];
      if (sum == 0x5eed) *sink = sum;  // keeps the loads
    }
    __syncthreads();
    if (threadIdx.x == 0) store_release_sys(&box->done, i);
  }
}

__global__ void empty() {}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

using Clock = std::chrono::steady_clock;
double since_us(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

}  // namespace

int main() {
  constexpr int kRounds = 20000;
  Box* box = nullptr;
  Box* box_on_device = nullptr;
  std::uint64_t* sink = nullptr;
  cudaStream_t stream;
  if (cudaHostAlloc(reinterpret_cast<void**>(&box), sizeof(Box), cudaHostAllocMapped | cudaHostAllocPortable) !=
          cudaSuccess ||
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&box_on_device), box, 0) != cudaSuccess ||
      cudaMalloc(&sink, sizeof(*sink)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    std::fprintf(stderr, "mailbox-latency: needs a GPU\n");
    return 1;
  }
  for (bool read_item : {false, true}) {
    __atomic_store_n(&box->posted, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&box->done, 0, __ATOMIC_SEQ_CST);
    echo<<<1, 512, 0, stream>>>(box_on_device, kRounds, read_item, sink);
    std::vector<double> times;
    for (int i = 1; i <= kRounds; ++i) {
      const auto start = Clock::now();
      __atomic_store_n(&box->posted, static_cast<std::uint64_t>(i), __ATOMIC_RELEASE);
      while (__atomic_load_n(&box->done, __ATOMIC_ACQUIRE) < static_cast<std::uint64_t>(i)) {
      }
      times.push_back(since_us(start));
    }
    cudaStreamSynchronize(stream);
    std::printf("host -> GPU -> host through mapped memory%s: %.2f us\n",
                read_item ? ", then a 512-byte item read" : "", median(times));
  }
  std::vector<double> launch_sync, launch_alone;
  for (int i = 0; i < 2000; ++i) {
    const auto start = Clock::now();
    empty<<<1, 32, 0, stream>>>();
    launch_alone.push_back(since_us(start));
    cudaStreamSynchronize(stream);
    launch_sync.push_back(since_us(start));
  }
  std::printf("empty kernel launch + stream synchronize: %.2f us (the launch call alone: %.2f us)\n",
              median(launch_sync), median(launch_alone));
  return 0;
}
