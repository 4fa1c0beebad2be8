// The proxy GDA's ring with GPU threads as producers (gda_ring.h): many
// blocks post into rings smaller than what they post (they wait for room),
// the proxy thread executes every descriptor in each block's order, puts
// land before the signal that follows them, and quiet (wait_completed)
// returns once the proxy has finished a block's operations. Then two ranks
// (threads with a loopback bootstrap and socket networks of their own, as
// two machines): a kernel on rank 0 puts into rank 1's device window through
// the net executor (gda_net.h) while a kernel on rank 1 waits for the
// signals. No MPI: one process, GPU 0. Prints "No Errors" on success.
//
// No wait here is unbounded: a kernel still running after kKernelSeconds
// is reported with its ring's counters, its proxy is stopped (producers
// waiting on the ring return) and the test's own waiting kernel is told to
// end, so a hang ends as a failure and leaves the GPU usable.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include <thread>

#include "engine/bootstrap/tcp_bootstrap.h"
#include "engine/gpu/gpu.h"
#include "engine/transport/gda/gda_net.h"
#include "engine/transport/socket_network.h"
#include "engine/transport/gda/proxy.h"

namespace gda = ferry::gda;

namespace {

constexpr double kKernelSeconds = 20;

int errors = 0;

void check(bool ok, const char* what) {
  if (ok) return;
  ++errors;
  std::fprintf(stderr, "FAIL: %s\n", what);
}

// The target: a window in host memory that the proxy fills with the
// backend's copies from the GPU's memory.
class HostWindowExecutor : public gda::GdaExecutor {
 public:
  HostWindowExecutor(ferry::gpu::Backend* backend, std::size_t bytes) : backend_(backend), window(bytes, 0) {}

  ferry::Status start(const gda::GdaDescriptor& d, int ring, std::uint64_t ticket) override {
    const auto op = static_cast<gda::GdaOp>(d.op);
    if (op == gda::GdaOp::kPut || op == gda::GdaOp::kPutSignal) {
      // The posting kernel runs meanwhile: a stream that does not wait for it.
      if (!stream_ && !ferry::ok(backend_->stream_create_independent(&stream_))) return ferry::Status::kGpuError;
      const ferry::Status status =
          backend_->copy_and_wait(window.data() + d.offset, reinterpret_cast<const void*>(d.source), d.bytes, stream_);
      if (!ferry::ok(status)) return status;
    }
    if (op == gda::GdaOp::kPutSignal || op == gda::GdaOp::kSignal) {
      std::uint64_t word = 0;
      std::memcpy(&word, window.data() + d.signal_offset, 8);
      word = static_cast<gda::GdaSignalOp>(d.signal_op) == gda::GdaSignalOp::kAdd ? word + d.value : d.value;
      std::memcpy(window.data() + d.signal_offset, &word, 8);
      // A signal's value at once after the put it follows: the put's
      // bytes must already be in place.
      if (op == gda::GdaOp::kPutSignal) {
        const unsigned char* landed = reinterpret_cast<const unsigned char*>(window.data() + d.offset);
        puts_in_place = puts_in_place && landed[0] == static_cast<unsigned char>(d.value) &&
                        landed[d.bytes - 1] == static_cast<unsigned char>(d.value + d.bytes - 1);
      }
    }
    order.push_back({ring, d.producer, d.value});
    applied.push_back({ring, ticket});
    return ferry::Status::kOk;
  }

  ferry::Status progress(const std::function<void(int, std::uint64_t)>& finished) override {
    for (const auto& [ring, ticket] : applied) finished(ring, ticket);
    applied.clear();
    return ferry::Status::kOk;
  }

  struct Seen {
    int ring;
    std::uint32_t producer;
    std::uint64_t value;
  };
  ferry::gpu::Backend* backend_;
  ferry::gpu::Stream stream_ = nullptr;
  std::vector<char> window;
  std::vector<Seen> order;
  std::vector<std::pair<int, std::uint64_t>> applied;  // not yet reported
  bool puts_in_place = true;
};

// Waits for stream (0: the whole device) up to kKernelSeconds; on time out
// prints the ring's counters, abandons the proxy (its producers return) and
// raises *give_up (the test's own waiting kernels return), then waits.
bool finished_in_time(cudaStream_t stream, const char* what, const gda::GdaRing& ring, gda::GdaProxy& proxy,
                      volatile int* give_up = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kKernelSeconds);
  for (;;) {
    const cudaError_t state = stream ? cudaStreamQuery(stream) : cudaStreamQuery(cudaStreamLegacy);
    if (state == cudaSuccess) return true;
    if (state != cudaErrorNotReady) {
      std::fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(state));
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // The ring's words are pinned host memory: reported before any CUDA call,
  // which may itself wait.
  std::fprintf(stderr, "FAIL: %s still running after %.0f s: consumed %llu, started %llu, completed %llu, proxy %s\n",
               what, kKernelSeconds, static_cast<unsigned long long>(__atomic_load_n(&ring.words->consumed, __ATOMIC_ACQUIRE)),
               static_cast<unsigned long long>(__atomic_load_n(&ring.words->started, __ATOMIC_ACQUIRE)),
               static_cast<unsigned long long>(__atomic_load_n(&ring.words->completed, __ATOMIC_ACQUIRE)),
               ferry::status_name(proxy.status()));
  std::fflush(stderr);
  proxy.abandon(ferry::Status::kTimeout);
  proxy.stop();
  if (give_up) *give_up = 1;
  if (stream) cudaStreamSynchronize(stream); else cudaDeviceSynchronize();
  return false;
}

constexpr int kBlocks = 64;
constexpr int kPostsPerBlock = 200;
constexpr std::uint32_t kCapacity = 16;
constexpr std::size_t kPutBytes = 1001;  // odd: the copies are unaligned

// Each block's first thread posts signal adds 1..kPostsPerBlock into its
// slot of the window, then waits for them (quiet). failed[b]: a post or
// the wait came back failed.
__global__ void post_signals(gda::GdaRing ring, int* failed) {
  if (threadIdx.x != 0) return;
  std::uint64_t last = 0;
  for (int i = 0; i < kPostsPerBlock; ++i) {
    gda::GdaDescriptor d{};
    d.op = static_cast<std::uint8_t>(gda::GdaOp::kSignal);
    d.signal_op = static_cast<std::uint8_t>(gda::GdaSignalOp::kAdd);
    d.signal_offset = 8 * blockIdx.x;
    d.value = i + 1;
    d.producer = blockIdx.x;
    last = gda::post(ring, d);
    if (last == gda::kRingFailed) {
      failed[blockIdx.x] = 1;
      return;
    }
  }
  if (!gda::wait_completed(ring, last)) failed[blockIdx.x] = 1;
}

// One thread puts `rounds` pieces of source, each followed by its signal.
__global__ void put_then_signal(gda::GdaRing ring, const unsigned char* source, int rounds, int* failed) {
  for (int r = 0; r < rounds; ++r) {
    gda::GdaDescriptor d{};
    d.op = static_cast<std::uint8_t>(gda::GdaOp::kPutSignal);
    d.source = reinterpret_cast<std::uintptr_t>(source + r);
    d.offset = 64 + 3 * r;
    d.bytes = kPutBytes;
    d.signal_op = static_cast<std::uint8_t>(gda::GdaSignalOp::kSet);
    d.signal_offset = 0;
    d.value = r;
    if (gda::post(ring, d) == gda::kRingFailed) *failed = 1;
  }
}

// Every block puts its slice of source into rank `target`'s window (after
// the signal words) and adds 1 to its signal word there, `rounds` times;
// then waits for completion (quiet).
constexpr int kRemoteBlocks = 8;
constexpr std::size_t kSlice = 4099;
__global__ void put_to_remote(gda::GdaRing ring, int target, const unsigned char* source, int rounds, int* failed) {
  if (threadIdx.x != 0) return;
  std::uint64_t last = 0;
  for (int r = 0; r < rounds; ++r) {
    gda::GdaDescriptor d{};
    d.op = static_cast<std::uint8_t>(gda::GdaOp::kPutSignal);
    d.window = 1;
    d.target = target;
    d.source = reinterpret_cast<std::uintptr_t>(source + blockIdx.x * kSlice);
    d.offset = 8 * kRemoteBlocks + blockIdx.x * kSlice;
    d.bytes = kSlice;
    d.signal_op = static_cast<std::uint8_t>(gda::GdaSignalOp::kAdd);
    d.signal_offset = 8 * blockIdx.x;
    d.value = 1;
    d.producer = blockIdx.x;
    last = gda::post(ring, d);
    if (last == gda::kRingFailed) break;
  }
  if (last == gda::kRingFailed || !gda::wait_completed(ring, last)) failed[blockIdx.x] = 1;
}

// Block b waits until its signal word in this rank's window reaches rounds
// (or the host gives up: *give_up, mapped host memory).
__global__ void wait_signals(const unsigned long long* window, int rounds, const volatile int* give_up) {
  if (threadIdx.x != 0) return;
  while (*reinterpret_cast<const volatile unsigned long long*>(&window[blockIdx.x]) < rounds && *give_up == 0)
    __nanosleep(256);
}

// Rank `rank` of two, over bootstrap: rank 0 puts from its GPU, rank 1's
// GPU waits for the data.
void remote_rank(ferry::gpu::Backend* backend, ferry::Bootstrap& bootstrap, const std::vector<unsigned char>& pattern,
                 int rounds, bool* passed) {
  const int rank = bootstrap.rank();
  if (!ferry::ok(backend->set_device(0))) return;
  ferry::SocketNetworkOptions options;
  options.ifname = "lo";
  std::unique_ptr<ferry::NetProvider> net;
  if (!ferry::ok(ferry::make_socket_network(bootstrap, &net, options))) return;
  const std::size_t window_bytes = 8 * kRemoteBlocks + kRemoteBlocks * kSlice;
  unsigned char* window = nullptr;
  unsigned char* source = nullptr;
  int* failed = nullptr;
  cudaMalloc(&window, window_bytes);
  cudaMemset(window, 0, window_bytes);
  cudaMalloc(&source, pattern.size());
  cudaMemcpy(source, pattern.data(), pattern.size(), cudaMemcpyHostToDevice);
  cudaMalloc(&failed, kRemoteBlocks * sizeof(int));
  cudaMemset(failed, 0, kRemoteBlocks * sizeof(int));
  cudaDeviceSynchronize();
  {
    gda::GdaNetExecutor executor(backend, std::move(net));
    executor.add_window(1, window, window_bytes);
    gda::GdaProxy proxy(backend, &executor);
    gda::GdaRing ring{};
    bool ok = ferry::ok(proxy.add_ring(16, gda::Producers::kDevice, &ring));
    // Allocated before either rank's kernel runs: an allocation may wait for
    // the device to be idle, and hold up the proxies' copies meanwhile.
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    int* give_up = nullptr;
    cudaHostAlloc(&give_up, sizeof(int), cudaHostAllocMapped);
    *give_up = 0;
    ok = ferry::ok(bootstrap.barrier()) && ok;
    proxy.start();
    if (rank == 0)
      put_to_remote<<<kRemoteBlocks, 32, 0, stream>>>(ring, 1, source, rounds, failed);
    else
      wait_signals<<<kRemoteBlocks, 32, 0, stream>>>(reinterpret_cast<unsigned long long*>(window), rounds, give_up);
    ok = finished_in_time(stream, rank == 0 ? "rank 0's puts" : "rank 1's wait for the signals", ring, proxy, give_up) &&
         ok;
    cudaStreamDestroy(stream);
    cudaFreeHost(give_up);
    std::vector<int> failures(kRemoteBlocks);
    cudaMemcpy(failures.data(), failed, failures.size() * sizeof(int), cudaMemcpyDeviceToHost);
    for (int f : failures) ok = ok && f == 0;
    ok = ferry::ok(bootstrap.barrier()) && ok;
    if (rank == 1) {
      std::vector<unsigned char> landed(window_bytes);
      cudaMemcpy(landed.data(), window, window_bytes, cudaMemcpyDeviceToHost);
      ok = ok && std::memcmp(landed.data() + 8 * kRemoteBlocks, pattern.data(), kRemoteBlocks * kSlice) == 0;
    }
    ok = ok && ferry::ok(proxy.status());
    *passed = ok;
    proxy.stop();
  }
  cudaFree(window);
  cudaFree(source);
  cudaFree(failed);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // each case's line even if a later one is stopped
  ferry::gpu::Backend* backend = ferry::gpu::cuda_backend();
  if (backend == nullptr) {
    std::fprintf(stderr, "no CUDA GPU: %s\n", ferry::gpu::cuda_unavailable_reason().c_str());
    return 1;
  }
  const ferry::Status status = backend->set_device(0);
  if (!ferry::ok(status)) {
    std::fprintf(stderr, "GPU 0 cannot be used: %s\n", ferry::status_name(status));
    return 1;
  }
  int* failed = nullptr;
  cudaMalloc(&failed, kBlocks * sizeof(int));
  cudaMemset(failed, 0, kBlocks * sizeof(int));

  {  // Many blocks, a small ring: back-pressure, wrap-around, each block's order.
    std::printf("case 1: %d blocks post signal adds into a ring of %u\n", kBlocks, kCapacity);
    HostWindowExecutor executor(backend, 8 * kBlocks);
    gda::GdaProxy proxy(backend, &executor);
    gda::GdaRing ring{};
    check(ferry::ok(proxy.add_ring(kCapacity, gda::Producers::kDevice, &ring)), "add_ring");
    proxy.start();
    post_signals<<<kBlocks, 32>>>(ring, failed);  // no copies: the default stream may wait
    check(finished_in_time(nullptr, "post_signals", ring, proxy), "post_signals ran");
    proxy.stop();
    std::vector<int> failures(kBlocks);
    cudaMemcpy(failures.data(), failed, kBlocks * sizeof(int), cudaMemcpyDeviceToHost);
    for (int b = 0; b < kBlocks; ++b) check(failures[b] == 0, "a block's post or quiet failed");
    check(executor.order.size() == std::size_t{kBlocks} * kPostsPerBlock, "every descriptor executed once");
    std::vector<std::uint64_t> next(kBlocks, 1);
    bool in_order = true;
    for (const auto& seen : executor.order) in_order = in_order && seen.value == next[seen.producer]++;
    check(in_order, "each block's descriptors in the order it posted them");
    for (int b = 0; b < kBlocks; ++b) {
      std::uint64_t sum = 0;
      std::memcpy(&sum, executor.window.data() + 8 * b, 8);
      check(sum == std::uint64_t{kPostsPerBlock} * (kPostsPerBlock + 1) / 2, "a block's signal sum");
    }
    std::printf("blocks %d, posts %d, ring %u: %zu executed\n", kBlocks, kBlocks * kPostsPerBlock, kCapacity,
                executor.order.size());
  }

  {  // Puts from device memory, each followed by its signal.
    std::printf("case 2: puts from device memory, each followed by its signal\n");
    constexpr int kRounds = 100;
    std::vector<unsigned char> pattern(kPutBytes + kRounds);
    for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(i);
    unsigned char* source = nullptr;
    cudaMalloc(&source, pattern.size());
    cudaMemcpy(source, pattern.data(), pattern.size(), cudaMemcpyHostToDevice);
    HostWindowExecutor executor(backend, 64 + 3 * kRounds + kPutBytes);
    gda::GdaProxy proxy(backend, &executor);
    gda::GdaRing ring{};
    check(ferry::ok(proxy.add_ring(8, gda::Producers::kDevice, &ring)), "add_ring");
    proxy.start();
    cudaMemset(failed, 0, sizeof(int));
    put_then_signal<<<1, 1>>>(ring, source, kRounds, failed);
    check(finished_in_time(nullptr, "put_then_signal", ring, proxy), "put_then_signal ran");
    proxy.stop();
    int failure = 0;
    cudaMemcpy(&failure, failed, sizeof(int), cudaMemcpyDeviceToHost);
    check(failure == 0, "a put's post failed");
    check(executor.order.size() == kRounds, "every put executed");
    check(executor.puts_in_place, "each put's bytes in place when its signal was set");
    const int last = kRounds - 1;
    check(std::memcmp(executor.window.data() + 64 + 3 * last, pattern.data() + last, kPutBytes) == 0,
          "the last put's bytes");
    cudaFree(source);
  }
  cudaFree(failed);

  {  // GPU-initiated puts to a rank on another (virtual) machine.
    std::printf("case 3: puts from rank 0's kernel into rank 1's device window over sockets\n");
    constexpr int kRounds = 50;
    // Both kernels loaded before either runs: where CUDA loads modules
    // lazily, the first launch of one waits for the device to be idle, so
    // for the other rank's kernel, which waits for the proxy's copies,
    // which wait for that launch (include/ferry/device.h).
    cudaFuncAttributes attributes{};
    check(cudaFuncGetAttributes(&attributes, put_to_remote) == cudaSuccess &&
              cudaFuncGetAttributes(&attributes, wait_signals) == cudaSuccess,
          "the remote case's kernels load");
    std::vector<unsigned char> pattern(kRemoteBlocks * kSlice);
    for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(i * 13 + 5);
    ferry::TcpBootstrapOptions options;
    options.timeout_s = 30;
    options.loopback = true;
    std::string id;
    check(ferry::ok(ferry::create_unique_id(&id, options)), "a loopback bootstrap");
    bool passed[2] = {false, false};
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < 2; ++rank)
      ranks.emplace_back([&, rank] {
        std::unique_ptr<ferry::Bootstrap> bootstrap;
        if (!ferry::ok(ferry::make_tcp_bootstrap(id, rank, 2, &bootstrap, options))) return;
        remote_rank(backend, *bootstrap, pattern, kRounds, &passed[rank]);
      });
    for (auto& t : ranks) t.join();
    check(passed[0], "rank 0's puts to the other machine completed (quiet)");
    check(passed[1], "rank 1's window holds the data once its signals arrived");
    std::printf("remote: %d blocks x %d puts of %zu bytes with signals, rank 0 -> rank 1 over the socket provider\n",
                kRemoteBlocks, kRounds, kSlice);
  }
  if (errors == 0) std::printf("No Errors\n");
  return errors == 0 ? 0 : 1;
}
