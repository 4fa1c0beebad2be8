// What the engine worker itself costs a blocking call, on one GPU, without
// MPI or peers: the host-clock time of Worker::run for a device-to-device
// copy item, run by one worker block or shared by all of them, from 8 bytes
// up (median of many). The difference between the two columns at small
// sizes is the price of sharing an item among blocks; at large sizes, what
// the blocks gain back. Compare with bench/mailbox-latency's floors.
//
// Usage: worker-latency [--blocks N] [--iters N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/collectives/worker.h"
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
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--blocks") == 0) blocks = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--iters") == 0) iterations = std::atoi(argv[i + 1]);
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
  auto worker = ferry::Worker::create(gpu, 0, blocks, 1000000);
  if (!worker) {
    std::fprintf(stderr, "worker-latency: no engine worker\n");
    return 1;
  }
  std::printf("worker: %d blocks; host-clock median of %d calls, microseconds\n", blocks, iterations);
  std::printf("%10s %12s %12s\n", "bytes", "one block", "all blocks");
  for (std::size_t bytes = 8; bytes <= kMaxBytes; bytes *= 4) {
    ferry::WorkItem item{};
    item.kind = ferry::WorkKind::kCopies;
    item.copies.count = 1;
    item.copies.sources[0] = source;
    item.copies.destinations[0] = destination;
    item.copies.bytes[0] = bytes;
    item.blocks = 1;
    const double one = time_item(*worker, item, iterations);
    item.blocks = blocks;
    const double all = time_item(*worker, item, iterations);
    std::printf("%10zu %12.2f %12.2f\n", bytes, one, all);
  }
  worker.reset();
  gpu->device_free(source);
  gpu->device_free(destination);
  return 0;
}
