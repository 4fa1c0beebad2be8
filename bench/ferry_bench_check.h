// ferry-bench's check of every column before it is timed: device buffers
// sized for the largest case, each rank's input and the host reference its
// result must equal.
#pragma once

#include <cstddef>
#include <vector>

#include "ferry_bench_memory.h"
#include "ferry_bench_methods.h"
#include "ferry_bench_ops.h"

namespace ferry_bench {

// Device buffers sized for the largest case, with the host reference for the
// case at hand.
class Harness {
 public:
  Harness(const FerryApi& ferry, std::size_t max_count, int rank, int nranks)
      : ferry_(ferry),
        send_(ferry, max_count * sizeof(float)),
        recv_(ferry, max_count * sizeof(float)),
        rank_(rank),
        nranks_(nranks) {
    input_.reserve(max_count);
    expected_.reserve(max_count);
    readback_.reserve(max_count);
  }

  Buffers device() const { return {send_.get(), recv_.get()}; }

  // This rank's input for `c`, and the result it must end with.
  void prepare(const Case& c);

  // Runs `method` once on fresh inputs and compares every element with the
  // reference; wrong data on any rank ends the run.
  void verify(Method& method, const char* method_title, const Case& c);

 private:
  const FerryApi& ferry_;
  DeviceBuffer send_, recv_;
  int rank_, nranks_;
  std::vector<float> input_, expected_, readback_;
};

}  // namespace ferry_bench
