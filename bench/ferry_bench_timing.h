// How ferry-bench times one column on one case: warm-up, then the timed
// iterations, each from a barrier, reduced to the median of the slowest
// rank's times.
#pragma once

#include <optional>

#include "ferry_bench_cuda.h"
#include "ferry_bench_methods.h"
#include "ferry_bench_ops.h"
#include "ferry_bench_options.h"

namespace ferry_bench {

struct Timing {
  double blocking_us;            // host wall clock around the blocking call
  std::optional<double> gpu_us;  // CUDA events around the operation
};

// Every timed iteration starts from a barrier, so ranks enter together; each
// counts as long as its slowest rank took. Collective over MPI_COMM_WORLD. With
// a timer and a method that has an event stream, a second pass times the
// operation with CUDA events.
Timing measure(Method& method, const Case& c, const IterationPlan& plan, cuda::EventTimer* timer);

}  // namespace ferry_bench
