// What the engine worker's tests share: buffers on the unit tests' device
// and the work items they run (worker_test.cc, worker_ll_test.cc,
// worker_tables_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/collectives/worker.h"
#include "engine/collectives/worker_common.h"
#include "tests/unit/unit_test_device.h"

namespace ferry::worker_test {

inline gpu::Backend* device() { return testing::unit_test_device(); }

struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t bytes) : bytes(bytes) {
    EXPECT_EQ(device()->device_alloc(bytes, &ptr), Status::kOk);
  }
  ~DeviceBuffer() { EXPECT_TRUE(ferry::ok(device()->device_free(ptr))); }
  template <typename T>
  void fill(const std::vector<T>& values) {
    ASSERT_EQ(gpu::copy(ptr, values.data(), values.size() * sizeof(T)), Status::kOk);
  }
  template <typename T>
  std::vector<T> read() const {
    std::vector<T> values(bytes / sizeof(T));
    EXPECT_EQ(gpu::copy(values.data(), ptr, bytes), Status::kOk);
    return values;
  }
  std::size_t bytes;
  void* ptr = nullptr;
};

inline WorkItem sum_of(const std::vector<DeviceBuffer*>& inputs, DeviceBuffer& output, std::size_t count) {
  WorkItem item{};
  item.kind = WorkKind::kDirectReduce;
  item.blocks = 1;
  item.reduce.ninputs = static_cast<int>(inputs.size());
  for (std::size_t r = 0; r < inputs.size(); ++r) item.reduce.inputs[r] = inputs[r]->ptr;
  item.reduce.noutputs = 1;
  item.reduce.outputs[0] = output.ptr;
  item.reduce.count = count;
  item.reduce.type = DataType::kInt64;
  item.reduce.op = ReduceOp::kSum;
  return item;
}

inline WorkItem ll_sum(DeviceBuffer& input, DeviceBuffer& output, std::size_t count, const std::vector<DeviceBuffer*>& ll,
               int rank, std::uint64_t call, std::uint32_t timeout_ms) {
  WorkItem item{};
  item.kind = WorkKind::kLlAllreduce;
  item.blocks = 1;
  item.ll.input = input.ptr;
  item.ll.output = output.ptr;
  for (std::size_t r = 0; r < ll.size(); ++r) item.ll.buffers[r] = ll[r]->ptr;
  item.ll.count = count;
  item.ll.type = DataType::kInt64;
  item.ll.op = ReduceOp::kSum;
  item.ll.rank = rank;
  item.ll.nranks = static_cast<int>(ll.size());
  item.ll.flag = doorbell_flag(call);
  item.ll.parity = static_cast<std::uint32_t>(call % 2);
  item.ll.timeout_ms = timeout_ms;
  return item;
}

}  // namespace ferry::worker_test
