// Compiles every call of the device API (ferry/device.h) in a HIP kernel:
// the HIP build's check that the header serves AMD GPUs' kernels as it
// serves CUDA's. Built, never run (no AMD GPU in CI).
#include <ferry/device.h>

namespace fd = ferry::device;

__global__ void every_call(ferry_window_device_t w, char* scratch, unsigned flag) {
  const int peer = (w.rank + 1) % w.size;
  if (!fd::reachable(w, peer)) return;
  fd::put(w, peer, 0, scratch, 64);
  fd::put_warp(w, peer, 64, scratch, 256);
  fd::put_block(w, peer, 512, scratch, 1024);
  fd::get(w, peer, 0, scratch, 64);
  fd::get_warp(w, peer, 64, scratch, 256);
  fd::get_block(w, peer, 512, scratch, 1024);
  fd::p(w, peer, 2048, 1.0);
  scratch[0] = static_cast<char>(fd::g<int>(w, peer, 2048));
  fd::atomic_add(w, peer, 2056, 1ULL);
  (void)fd::fetch_add(w, peer, 2064, 1.5f);
  (void)fd::compare_swap(w, peer, 2072, 0u, 1u);
  // 64-bit integers: the forms that reach other machines.
  (void)fd::fetch_add(w, peer, 2096, 1ULL);
  (void)fd::compare_swap(w, peer, 2104, 0ULL, 1ULL);
  fd::fence();
  fd::put_signal(w, peer, 0, scratch, 8, 2080, 1ULL, fd::SignalOp::kAdd);
  fd::signal(w, peer, 2088, flag);
  fd::quiet();
  fd::quiet(w);
  (void)fd::wait_until(w, 2088, fd::Compare::kGe, flag);
  fd::ll::put(w, peer, 4096, scratch, 100, flag, threadIdx.x % warpSize, warpSize);
  fd::ll::wait(w, 4096, scratch, 100, flag, threadIdx.x % warpSize, warpSize);
  fd::barrier_block(w);
}
