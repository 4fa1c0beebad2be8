// The ways a blocking call can make a small copy and know it is done, timed
// with the host clock (median of many, each call from an idle GPU): a
// copy-engine copy waited for by synchronizing; a kernel (a block per 4 KiB,
// 32 at most) that copies and raises a word in mapped host memory the host
// spins on, launched, or replayed from a CUDA graph whose node takes each
// call's arguments; and a graph of a copy-engine copy and a stream write of
// that word. Within one GPU, from the second GPU's memory when there is one
// (peer access on), and between the GPU and pinned host memory.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double since_us(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

__device__ void store_release_sys(std::uint32_t* p, std::uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// 16-byte words where both ends allow it, bytes for the rest.
// The last block to finish raises done (finished counts blocks, reset by it).
__global__ void copy_and_raise(char* dst, const char* src, std::size_t bytes, std::uint32_t* done,
                               std::uint32_t value, unsigned* finished) {
  const std::size_t words = (reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) % 16
                                ? 0
                                : bytes / 16;
  const std::size_t first = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
  for (std::size_t i = first; i < words; i += stride)
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  for (std::size_t i = words * 16 + first; i < bytes; i += stride) dst[i] = src[i];
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence_system();
  if (gridDim.x > 1 && atomicAdd(finished, 1) != gridDim.x - 1) return;
  if (gridDim.x > 1) *finished = 0;
  store_release_sys(done, value);
}

void spin_until(const std::uint32_t* word, std::uint32_t value) {
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != value) {
  }
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "copy-latency: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

struct Ways {
  double memcpy_sync, async_sync, kernel_flag, graph_flag, graph_blocking, graph_same, copy_graph, copy_graph_legacy;
  double copy_graph_same, launch_call, set_params;
};

constexpr int kIterations = 3000;
constexpr int kThreads = 256;
constexpr std::size_t kBytesPerBlock = 4096;

unsigned blocks_for(std::size_t bytes) {
  return static_cast<unsigned>(std::min<std::size_t>(32, (bytes + kBytesPerBlock - 1) / kBytesPerBlock));
}

// Each way copies src to dst kIterations times; results checked at the end.
bool time_ways(char* dst, const char* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
               cudaStream_t blocking, std::uint32_t* done_host, std::uint32_t* done_device, unsigned* finished,
               Ways* ways) {
  const unsigned blocks = blocks_for(bytes);
  std::vector<double> t(kIterations);
  for (double& sample : t) {
    const auto start = Clock::now();
    // Device to device, cudaMemcpy may return before the copy is done.
    cudaMemcpy(dst, src, bytes, kind);
    if (!check(cudaStreamSynchronize(cudaStreamLegacy), "cudaMemcpy")) return false;
    sample = since_us(start);
  }
  ways->memcpy_sync = median(t);

  for (double& sample : t) {
    const auto start = Clock::now();
    cudaMemcpyAsync(dst, src, bytes, kind, stream);
    if (!check(cudaStreamSynchronize(stream), "cudaMemcpyAsync")) return false;
    sample = since_us(start);
  }
  ways->async_sync = median(t);

  std::uint32_t value = *done_host;
  std::vector<double> launch(kIterations);
  for (int i = 0; i < kIterations; ++i) {
    const auto start = Clock::now();
    copy_and_raise<<<blocks, kThreads, 0, stream>>>(dst, src, bytes, done_device, ++value, finished);
    launch[i] = since_us(start);
    spin_until(done_host, value);
    t[i] = since_us(start);
  }
  if (!check(cudaStreamSynchronize(stream), "copy kernel")) return false;
  ways->kernel_flag = median(t);
  ways->launch_call = median(launch);

  // The graph: the kernel captured once, its arguments set before each launch.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  copy_and_raise<<<blocks, kThreads, 0, stream>>>(dst, src, bytes, done_device, value, finished);
  if (!check(cudaStreamEndCapture(stream, &graph), "capture") ||
      !check(cudaGraphInstantiate(&exec, graph, 0), "instantiate"))
    return false;
  cudaGraphNode_t node = nullptr;
  std::size_t nodes = 1;
  cudaGraphGetNodes(graph, &node, &nodes);
  cudaKernelNodeParams params{};
  cudaGraphKernelNodeGetParams(node, &params);
  char* d = dst;
  const char* s = src;
  std::size_t b = bytes;
  std::uint32_t* w = done_device;
  void* args[] = {&d, &s, &b, &w, &value, &finished};
  params.kernelParams = args;
  auto time_graph = [&](cudaStream_t into, double* result, double* set_params) {
    for (int i = 0; i < kIterations; ++i) {
      const auto start = Clock::now();
      ++value;
      cudaGraphExecKernelNodeSetParams(exec, node, &params);
      launch[i] = since_us(start);
      if (!check(cudaGraphLaunch(exec, into), "graph launch")) return false;
      spin_until(done_host, value);
      t[i] = since_us(start);
    }
    if (set_params) *set_params = median(launch);
    *result = median(t);
    return check(cudaStreamSynchronize(into), "graph");
  };
  if (!time_graph(stream, &ways->graph_flag, &ways->set_params) ||
      !time_graph(blocking, &ways->graph_blocking, nullptr))
    return false;
  // The same arguments every call (the flag's value too: reset by the host).
  for (double& sample : t) {
    __atomic_store_n(done_host, 0u, __ATOMIC_RELEASE);
    const auto start = Clock::now();
    if (!check(cudaGraphLaunch(exec, stream), "graph launch")) return false;
    spin_until(done_host, value);
    sample = since_us(start);
  }
  if (!check(cudaStreamSynchronize(stream), "graph")) return false;
  ways->graph_same = median(t);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // A copy-engine copy and a stream write of the flag, as one graph: no SM.
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  cudaMemcpyAsync(dst, src, bytes, kind, stream);
  cuStreamWriteValue32(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(done_device), 1, 0);
  if (!check(cudaStreamEndCapture(stream, &graph), "capture of a copy") ||
      !check(cudaGraphInstantiate(&exec, graph, 0), "instantiate a copy"))
    return false;
  // The copy is the root (the write after it is captured as a copy node too).
  cudaGraphNode_t copy_node = nullptr;
  nodes = 1;
  cudaGraphGetRootNodes(graph, &copy_node, &nodes);
  // On a stream of its own, and on the legacy default stream (as cudaMemcpy).
  for (cudaStream_t into : {stream, cudaStreamLegacy}) {
    for (double& sample : t) {
      __atomic_store_n(done_host, 0u, __ATOMIC_RELEASE);
      const auto start = Clock::now();
      cudaGraphExecMemcpyNodeSetParams1D(exec, copy_node, dst, src, bytes, kind);
      if (!check(cudaGraphLaunch(exec, into), "copy graph launch")) return false;
      spin_until(done_host, 1);
      sample = since_us(start);
    }
    if (!check(cudaStreamSynchronize(into), "copy graph")) return false;
    (into == stream ? ways->copy_graph : ways->copy_graph_legacy) = median(t);
  }
  // The same pointers every call: launched without an update.
  for (double& sample : t) {
    __atomic_store_n(done_host, 0u, __ATOMIC_RELEASE);
    const auto start = Clock::now();
    if (!check(cudaGraphLaunch(exec, cudaStreamLegacy), "copy graph launch")) return false;
    spin_until(done_host, 1);
    sample = since_us(start);
  }
  if (!check(cudaStreamSynchronize(cudaStreamLegacy), "copy graph")) return false;
  ways->copy_graph_same = median(t);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  *done_host = value;
  return true;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "copy-latency: needs a GPU\n");
    return 1;
  }
  const bool peer = devices > 1 && cudaSetDevice(0) == cudaSuccess && cudaDeviceEnablePeerAccess(1, 0) == cudaSuccess;
  cudaSetDevice(0);
  constexpr std::size_t kMaxBytes = 64 << 10;
  char *dst = nullptr, *src = nullptr, *remote = nullptr;
  std::uint32_t *done_host = nullptr, *done_device = nullptr;
  unsigned* finished = nullptr;
  cudaStream_t stream, blocking;
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (!check(cudaStreamCreateWithPriority(&blocking, cudaStreamDefault, greatest), "blocking stream")) return 1;
  if (!check(cudaMalloc(&dst, kMaxBytes + 16), "cudaMalloc") ||
      !check(cudaMalloc(&src, kMaxBytes + 16), "cudaMalloc") ||
      !check(cudaHostAlloc(reinterpret_cast<void**>(&done_host), 64, cudaHostAllocMapped), "cudaHostAlloc") ||
      !check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&done_device), done_host, 0), "mapped pointer") ||
      !check(cudaMalloc(&finished, sizeof(unsigned)), "cudaMalloc") ||
      !check(cudaMemset(finished, 0, sizeof(unsigned)), "cudaMemset") ||
      !check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"))
    return 1;
  *done_host = 0;
  if (peer) {
    cudaSetDevice(1);
    check(cudaMalloc(&remote, kMaxBytes + 16), "cudaMalloc on device 1");
    cudaSetDevice(0);
  }
  std::vector<char> pattern(kMaxBytes + 16), back(kMaxBytes + 16);
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>(i * 131 + 7);
  cudaMemcpy(src, pattern.data(), pattern.size(), cudaMemcpyHostToDevice);
  if (remote) cudaMemcpy(remote, pattern.data(), pattern.size(), cudaMemcpyHostToDevice);

  std::printf("one small device copy, waited for, host clock, median of %d (us)\n", kIterations);
  std::printf("%-9s %6s %12s %11s %12s %11s %10s %11s %10s %10s %8s %12s %11s\n", "from", "bytes", "memcpy+sync",
              "async+sync", "kernel+flag", "graph+flag", "graph blk", "graph same", "ce graph", "ce legacy", "ce same",
              "launch call", "set params");
  // Pinned host memory (the staged path's), mapped: the kernels reach it too.
  char* pinned = nullptr;
  if (!check(cudaHostAlloc(reinterpret_cast<void**>(&pinned), kMaxBytes + 16, cudaHostAllocMapped), "pinned"))
    return 1;
  std::memcpy(pinned, pattern.data(), pattern.size());
  struct Direction {
    const char* name;
    char* dst;
    const char* src;
    cudaMemcpyKind kind;
  };
  const Direction directions[] = {{"local", dst, src, cudaMemcpyDeviceToDevice},
                                  {"peer", dst, remote, cudaMemcpyDeviceToDevice},
                                  {"to host", pinned, src, cudaMemcpyDeviceToHost},
                                  {"from host", dst, pinned, cudaMemcpyHostToDevice}};
  int failures = 0;
  for (const Direction& way : directions) {
    if (!way.src) continue;
    for (std::size_t bytes : {8, 13, 4096, 16384, 65536}) {
      if (way.dst == pinned)
        std::memset(pinned, 0, kMaxBytes + 16);
      else
        cudaMemset(way.dst, 0, kMaxBytes + 16);
      Ways ways{};
      const std::size_t first = bytes % 2;  // odd sizes at an odd address
      if (!time_ways(way.dst + first, way.src + first, bytes, way.kind, stream, blocking, done_host, done_device,
                     finished, &ways))
        return 1;
      if (way.dst == pinned)
        std::memcpy(back.data(), pinned, back.size());
      else
        cudaMemcpy(back.data(), way.dst, back.size(), cudaMemcpyDeviceToHost);
      if (std::memcmp(back.data() + first, pattern.data() + first, bytes) != 0) {
        std::fprintf(stderr, "copy-latency: %s %zu bytes copied wrong\n", way.name, bytes);
        ++failures;
      }
      std::printf("%-9s %6zu %12.2f %11.2f %12.2f %11.2f %10.2f %11.2f %10.2f %10.2f %8.2f %12.2f %11.2f\n",
                  way.name, bytes, ways.memcpy_sync, ways.async_sync, ways.kernel_flag, ways.graph_flag,
                  ways.graph_blocking, ways.graph_same, ways.copy_graph, ways.copy_graph_legacy, ways.copy_graph_same,
                  ways.launch_call, ways.set_params);
    }
  }
  return failures ? 1 : 0;
}
