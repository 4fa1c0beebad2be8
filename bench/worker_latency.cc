// What the engine worker itself costs a blocking call, on one GPU, without
// MPI or peers. First, the device memory a running worker takes (most of
// it the stack the driver sets aside for every thread the GPU can hold).
// Then the host-clock time of Worker::run for a device-to-device
// copy item, run by one worker block or shared by all of them, from 8 bytes
// up (median of many). The difference between the two columns at small
// sizes is the price of sharing an item among blocks; at large sizes, what
// the blocks gain back. Compare with bench/mailbox-latency's floors.
// Last, the one-shot allreduce over LL and over LL128 between two workers of
// this process on the same GPU (two "ranks" whose receive buffers are in
// one device memory: no NVLink, so the protocols' own costs only), on the
// blocks the engine gives them (block 0 alone up to 8 KiB, a block per
// 4 KiB above) unless told otherwise. A result that is not the sum prints
// -1.
//
// Usage: worker-latency [--blocks N] [--iters N] [--one-block BYTES] [--per-block BYTES]
//   --one-block: largest allreduce on block 0 alone (the engine's default)
//   --per-block: bytes each sharing block takes above that (0: all blocks)
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/collectives/worker.h"
#include "engine/collectives/worker_common.h"
#include "engine/gpu/gpu.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median host-clock microseconds of worker.run(item) after a warm-up.
double time_item(ferry::Worker& worker, const ferry::WorkItem& item, int iterations) {
  for (int i = 0; i < 50; ++i)
    if (worker.run(item) != ferry::Status::kOk) return -1;
  std::vector<double> samples(iterations);
  for (double& sample : samples) {
    const auto start = Clock::now();
    if (worker.run(item) != ferry::Status::kOk) return -1;
    sample = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }
  return median(samples);
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 16, iterations = 2000;
  std::size_t one_block_bytes = ferry::kLlOneBlockBytes, per_block_bytes = ferry::kLlBytesPerSharingBlock;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--blocks") == 0) blocks = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--iters") == 0) iterations = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--one-block") == 0) one_block_bytes = std::strtoull(argv[i + 1], nullptr, 0);
    if (std::strcmp(argv[i], "--per-block") == 0) per_block_bytes = std::strtoull(argv[i + 1], nullptr, 0);
  }
  ferry::gpu::Backend* gpu = ferry::gpu::cuda_backend();
  if (!gpu) {
    std::fprintf(stderr, "worker-latency: no CUDA GPU\n");
    return 1;
  }
  constexpr std::size_t kMaxBytes = 4 << 20;
  void *source = nullptr, *destination = nullptr;
  if (gpu->device_alloc(kMaxBytes, &source) != ferry::Status::kOk ||
      gpu->device_alloc(kMaxBytes, &destination) != ferry::Status::kOk) {
    std::fprintf(stderr, "worker-latency: device allocation failed\n");
    return 1;
  }
  // A long idle limit: the worker stays up between the timed calls.
  std::size_t free_before = 0, free_after = 0, total = 0;
  cudaMemGetInfo(&free_before, &total);
  auto worker = ferry::Worker::create(gpu, 0, blocks, 1000000);
  if (!worker) {
    std::fprintf(stderr, "worker-latency: no engine worker\n");
    return 1;
  }
  // One copy of bytes from source to destination, on one block.
  auto copy_item = [&](std::size_t bytes) {
    ferry::WorkItem item{};
    item.kind = ferry::WorkKind::kCopies;
    item.copies.count = 1;
    item.copies.sources[0] = source;
    item.copies.destinations[0] = destination;
    item.copies.bytes[0] = bytes;
    item.blocks = 1;
    return item;
  };
  if (worker->run(copy_item(8)) != ferry::Status::kOk) return 1;
  cudaMemGetInfo(&free_after, &total);
  // The launch's own device memory: mailbox state, and the local memory
  // the driver sets aside for the kernel's stack on every thread the GPU
  // can hold.
  std::printf("device memory the running worker took: %.1f MiB\n",
              (static_cast<double>(free_before) - static_cast<double>(free_after)) / (1 << 20));
  std::printf("worker: %d blocks; host-clock median of %d calls, microseconds\n", blocks, iterations);
  std::printf("%10s %12s %12s\n", "bytes", "one block", "all blocks");
  for (std::size_t bytes = 8; bytes <= kMaxBytes; bytes *= 4) {
    ferry::WorkItem item = copy_item(bytes);
    const double one = time_item(*worker, item, iterations);
    item.blocks = blocks;
    const double all = time_item(*worker, item, iterations);
    std::printf("%10zu %12.2f %12.2f\n", bytes, one, all);
  }
  worker.reset();

  // Two ranks: worker r reduces input r with the other's into output r.
  // Their inputs (the copies above wrote over the second): small whole
  // numbers, so every float sum is exact.
  std::vector<float> input0(kMaxBytes / sizeof(float)), input1(kMaxBytes / sizeof(float));
  for (std::size_t i = 0; i < input0.size(); ++i) {
    input0[i] = static_cast<float>((i * 7919 + 13) % 1024);
    input1[i] = static_cast<float>((i * 104729 + 5) % 2048) - 1024;
  }
  if (!ferry::ok(ferry::gpu::copy(source, input0.data(), kMaxBytes)) ||
      !ferry::ok(ferry::gpu::copy(destination, input1.data(), kMaxBytes))) {
    std::fprintf(stderr, "worker-latency: cannot fill the inputs\n");
    return 1;
  }
  auto peer = ferry::Worker::create(gpu, 0, blocks, 1000000);
  auto self = ferry::Worker::create(gpu, 0, blocks, 1000000);
  void* ll[2] = {nullptr, nullptr};
  void* outputs[2] = {nullptr, nullptr};
  for (int r = 0; r < 2; ++r)
    if (!peer || !self || gpu->device_alloc(ferry::kLlBufferBytes, &ll[r]) != ferry::Status::kOk ||
        gpu->device_alloc(kMaxBytes, &outputs[r]) != ferry::Status::kOk) {
      std::fprintf(stderr, "worker-latency: no LL buffers\n");
      return 1;
    }
  const std::vector<char> zeros(ferry::kLlBufferBytes, 0);
  for (void* buffer : ll) {
    if (!ferry::ok(ferry::gpu::copy(buffer, zeros.data(), zeros.size()))) {  // no stale flags
      std::fprintf(stderr, "worker-latency: cannot clear the LL buffers\n");
      return 1;
    }
  }
  std::uint64_t call = 0;
  // Rank 1's thread runs items[1] once per go and counts it in done.
  ferry::WorkItem items[2] = {};
  std::atomic<std::uint64_t> go{0}, done{0};
  std::atomic<bool> failed{false}, leave{false};
  std::thread rank1([&] {
    for (std::uint64_t seen = 0;;) {
      while (go.load(std::memory_order_acquire) == seen)
        if (leave.load(std::memory_order_relaxed)) return;
      ++seen;
      if (self->run(items[1]) != ferry::Status::kOk) failed = true;
      done.store(seen, std::memory_order_release);
    }
  });
  // Median host-clock microseconds of one allreduce of kind, both ranks at
  // once; -1 when it failed or rank 0's result is not the sum.
  auto time_allreduce = [&](ferry::WorkKind kind, std::size_t bytes) {
    std::vector<double> samples(iterations);
    for (int i = -50; i < iterations; ++i) {
      ++call;
      for (int r = 0; r < 2; ++r) {
        ferry::WorkItem& item = items[r];
        item.kind = kind;
        item.blocks = ferry::ll_share_blocks(bytes, blocks, one_block_bytes, per_block_bytes);
        item.ll.input = r == 0 ? source : destination;
        item.ll.output = outputs[r];
        item.ll.buffers[0] = ll[0];
        item.ll.buffers[1] = ll[1];
        item.ll.count = bytes / sizeof(float);
        item.ll.type = ferry::DataType::kFloat32;
        item.ll.op = ferry::ReduceOp::kSum;
        item.ll.rank = r;
        item.ll.nranks = 2;
        item.ll.flag = ferry::doorbell_flag(call);
        item.ll.parity = static_cast<std::uint32_t>(call % 2);
        item.ll.timeout_ms = 10000;
      }
      const auto start = Clock::now();
      const std::uint64_t round = go.load(std::memory_order_relaxed) + 1;
      go.store(round, std::memory_order_release);
      const ferry::Status mine = peer->run(items[0]);
      while (done.load(std::memory_order_acquire) != round) {
      }
      if (mine != ferry::Status::kOk || failed) return -1.0;
      if (i >= 0) samples[i] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    }
    std::vector<float> out(bytes / sizeof(float));
    if (!ferry::ok(ferry::gpu::copy(out.data(), outputs[0], bytes))) return -1.0;
    for (std::size_t e = 0; e < out.size(); ++e)
      if (out[e] != input0[e] + input1[e]) return -1.0;
    return median(samples);
  };
  std::printf("\none-shot allreduce of floats between two workers on this GPU, microseconds\n");
  std::printf("(block 0 alone up to %zu bytes; above, a block per %zu bytes, 0: all)\n", one_block_bytes,
              per_block_bytes);
  std::printf("%10s %7s %12s %12s\n", "bytes", "blocks", "LL", "LL128");
  for (std::size_t bytes = 8; bytes <= ferry::ll_max_bytes(2); bytes *= 2)
    std::printf("%10zu %7d %12.2f %12.2f\n", bytes,
                ferry::ll_share_blocks(bytes, blocks, one_block_bytes, per_block_bytes),
                time_allreduce(ferry::WorkKind::kLlAllreduce, bytes),
                time_allreduce(ferry::WorkKind::kLl128Allreduce, bytes));
  leave = true;
  rank1.join();
  peer.reset();
  self.reset();
  for (void* p : {ll[0], ll[1], outputs[0], outputs[1], source, destination}) FERRY_LOG_IF_FAILED(gpu->device_free(p));
  return 0;
}
