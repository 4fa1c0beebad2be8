// The emulated device's virtual memory calls (gpu.h, vm_*), which the
// symmetric heap is built on.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "engine/gpu/gpu.h"

namespace ferry::gpu {
namespace {

class EmulatedVm : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(device->vm_granularity(&granularity), Status::kOk);
    ASSERT_GT(granularity, 0u);
    chunk = 4 * granularity;
    ASSERT_EQ(device->vm_reserve(4 * chunk, &base), Status::kOk);
  }
  void TearDown() override { EXPECT_EQ(device->vm_unreserve(base, 4 * chunk), Status::kOk); }

  char* at(std::size_t chunk_index) { return static_cast<char*>(base) + chunk_index * chunk; }

  Backend* device = emulated_backend();
  std::size_t granularity = 0;
  std::size_t chunk = 0;
  void* base = nullptr;
};

TEST_F(EmulatedVm, AdjacentChunksAreOneDeviceRange) {
  VmChunk a, b;
  ASSERT_EQ(device->vm_create(chunk, &a), Status::kOk);
  ASSERT_EQ(device->vm_create(chunk, &b), Status::kOk);
  ASSERT_EQ(device->vm_map(at(1), a), Status::kOk);
  ASSERT_EQ(device->vm_map(at(2), b), Status::kOk);
  EXPECT_EQ(device->vm_map(at(2), a), Status::kInvalidArgument);  // taken
  EXPECT_EQ(device->vm_map(at(4), a), Status::kInvalidArgument);  // past the reservation

  EXPECT_EQ(classify(at(0)).kind, MemoryKind::kHost);  // reserved, nothing mapped
  const PointerInfo first = classify(at(1) + 5), second = classify(at(2));
  EXPECT_EQ(first.kind, MemoryKind::kDevice);
  EXPECT_EQ(first.owner, BackendKind::kEmulated);
  EXPECT_EQ(first.base, reinterpret_cast<std::uintptr_t>(at(1)));
  EXPECT_EQ(first.size, chunk);
  EXPECT_EQ(second.kind, MemoryKind::kDevice);
  EXPECT_NE(first.allocation_id, second.allocation_id);

  // One copy across the boundary between the chunks, both ways.
  std::vector<int> values(chunk / sizeof(int));
  std::iota(values.begin(), values.end(), 7);
  char* middle = at(2) - chunk / 2;
  ASSERT_EQ(copy(middle, values.data(), chunk), Status::kOk);
  std::vector<int> back(values.size());
  ASSERT_EQ(copy(back.data(), middle, chunk), Status::kOk);
  EXPECT_EQ(back, values);
  // Not past the last mapped chunk.
  EXPECT_NE(copy(back.data(), at(3) - 8, 16), Status::kOk);

  // Heap chunks are not device_alloc's: neither freed nor exported as such.
  IpcHandle handle;
  EXPECT_EQ(device->device_free(at(1)), Status::kInvalidArgument);
  EXPECT_EQ(device->ipc_export(at(1), &handle), Status::kUnsupported);

  EXPECT_EQ(device->vm_unreserve(base, 4 * chunk), Status::kInvalidArgument);  // chunks still mapped
  EXPECT_EQ(device->vm_unmap(at(1), 2 * chunk), Status::kInvalidArgument);      // not one chunk
  ASSERT_EQ(device->vm_unmap(at(1), chunk), Status::kOk);
  ASSERT_EQ(device->vm_unmap(at(2), chunk), Status::kOk);
  EXPECT_EQ(classify(at(1)).kind, MemoryKind::kHost);
  EXPECT_EQ(device->vm_release(a), Status::kOk);
  EXPECT_EQ(device->vm_release(b), Status::kOk);
}

// What an exported chunk holds is what another process maps, both ways.
TEST_F(EmulatedVm, AnotherProcessMapsAnExportedChunk) {
  VmChunk own;
  ASSERT_EQ(device->vm_create(chunk, &own), Status::kOk);
  ASSERT_EQ(device->vm_map(at(0), own), Status::kOk);
  std::vector<int> values(chunk / sizeof(int));
  std::iota(values.begin(), values.end(), 100);
  ASSERT_EQ(copy(at(0), values.data(), chunk), Status::kOk);
  int fd = -1;
  ASSERT_EQ(device->vm_export(own, &fd), Status::kOk);

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child maps the chunk at another place of its own reservation
    // through the inherited descriptor, doubles every value.
    VmChunk imported;
    if (device->vm_import(fd, chunk, &imported) != Status::kOk) _exit(1);
    if (device->vm_map(at(3), imported) != Status::kOk) _exit(2);
    std::vector<int> seen(values.size());
    if (copy(seen.data(), at(3), chunk) != Status::kOk) _exit(3);
    for (int& v : seen) v *= 2;
    if (copy(at(3), seen.data(), chunk) != Status::kOk) _exit(4);
    if (device->vm_unmap(at(3), chunk) != Status::kOk || device->vm_release(imported) != Status::kOk) _exit(5);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  close(fd);
  std::vector<int> back(values.size());
  ASSERT_EQ(copy(back.data(), at(0), chunk), Status::kOk);
  for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], 2 * (100 + static_cast<int>(i)));
  EXPECT_EQ(device->vm_unmap(at(0), chunk), Status::kOk);
  EXPECT_EQ(device->vm_release(own), Status::kOk);
}

}  // namespace
}  // namespace ferry::gpu
