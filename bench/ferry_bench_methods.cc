#include "ferry_bench_methods.h"

namespace ferry_bench {

void FerryMethod::start(const Case& c) { run_mpi(c, device_.send, device_.recv); }

std::optional<cuda::Stream> FerryMethod::event_stream() const {
  if (!gpu_events_) return std::nullopt;
  return cuda::legacy_stream();
}

void StagedMethod::start(const Case& c) {
  const std::size_t bytes = c.bytes();
  if (c.op == Op::kBcast) {
    if (rank_ == kRoot) copy_or_throw(copy_, host_.send, device_.send, bytes);
    run_mpi(c, host_.send, host_.recv);
    if (rank_ != kRoot) copy_or_throw(copy_, device_.send, host_.send, bytes);
    return;
  }
  if (c.op == Op::kSend) {
    const bool sends = rank_ % 2 == 0;
    if (sends) copy_or_throw(copy_, host_.send, device_.send, bytes);
    run_mpi(c, host_.send, host_.recv);
    if (!sends) copy_or_throw(copy_, device_.recv, host_.recv, bytes);
    return;
  }
  copy_or_throw(copy_, host_.send, device_.send, bytes);
  run_mpi(c, host_.send, host_.recv);
  copy_or_throw(copy_, device_.recv, host_.recv, bytes);
}

void HostMethod::start(const Case& c) { run_mpi(c, host_.send, host_.recv); }

}  // namespace ferry_bench
