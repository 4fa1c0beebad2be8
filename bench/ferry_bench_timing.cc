#include "ferry_bench_timing.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace ferry_bench {
namespace {

// Each iteration counts as long as its slowest rank took.
double median_of_slowest(std::vector<double>* samples) {
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, samples->data(), static_cast<int>(samples->size()), MPI_DOUBLE, MPI_MAX,
                          MPI_COMM_WORLD),
            "MPI_Allreduce");
  std::sort(samples->begin(), samples->end());
  const std::size_t n = samples->size();
  return n % 2 ? (*samples)[n / 2] : ((*samples)[n / 2 - 1] + (*samples)[n / 2]) / 2;
}

}  // namespace

Timing measure(Method& method, const Case& c, const IterationPlan& plan, cuda::EventTimer* timer) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < plan.warmup; ++i) {
    method.start(c);
    method.finish();
  }
  std::vector<double> blocking_us(plan.timed);
  for (double& sample : blocking_us) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    const Clock::time_point begin = Clock::now();
    method.start(c);
    method.finish();
    sample = std::chrono::duration<double, std::micro>(Clock::now() - begin).count();
  }
  Timing timing{median_of_slowest(&blocking_us), std::nullopt};

  const std::optional<cuda::Stream> stream = method.event_stream();
  if (!timer || !stream) return timing;
  // A pass of its own: recording events inside the host-clock window would
  // add their cost to the blocking time.
  std::vector<double> gpu_us(plan.timed);
  for (double& sample : gpu_us) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    timer->start(*stream);
    method.start(c);
    timer->stop(*stream);
    method.finish();
    sample = timer->elapsed_us();
  }
  timing.gpu_us = median_of_slowest(&gpu_us);
  return timing;
}

}  // namespace ferry_bench
