// The backend's blocking copy: random bytes in every direction, odd sizes at
// unaligned offsets, from several threads at once, and on CUDA ordered after
// copies queued before it. On the emulated device by default; with
// FERRY_UNIT_TEST_DEVICE=cuda on GPU 0, where device-to-device copies go
// through the CUDA backend's copy graph (counted), or the ordinary way when
// the graph is busy with another thread's copy.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "engine/gpu/gpu.h"
#include "tests/unit/unit_test_device.h"

namespace ferry {
namespace {

gpu::Backend* device() { return testing::unit_test_device(); }

bool on_cuda() { return device() && device()->kind() == gpu::BackendKind::kCuda; }

std::vector<char> random_bytes(std::size_t bytes, unsigned seed) {
  std::vector<char> data(bytes);
  std::mt19937 rng(seed);
  for (char& b : data) b = static_cast<char>(rng());
  return data;
}

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(device()->device_alloc(bytes, &ptr_), Status::kOk);
  }
  ~DeviceMemory() { EXPECT_TRUE(ferry::ok(device()->device_free(ptr_))); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  char* at(std::size_t offset) const { return static_cast<char*>(ptr_) + offset; }
  std::vector<char> read() const {
    std::vector<char> host(bytes_);
    EXPECT_EQ(device()->copy(host.data(), ptr_, bytes_), Status::kOk);
    return host;
  }

 private:
  std::size_t bytes_;
  void* ptr_ = nullptr;
};

TEST(DeviceCopy, EveryDirectionOddSizesUnalignedOffsets) {
  ASSERT_NE(device(), nullptr);
  constexpr std::size_t kBytes = (std::size_t{1} << 20) + 64;
  DeviceMemory a(kBytes), b(kBytes);
  const std::vector<char> data = random_bytes(kBytes, 5);
  ASSERT_EQ(device()->copy(a.at(0), data.data(), kBytes), Status::kOk);
  EXPECT_EQ(a.read(), data) << "host to device";
  const std::uint64_t graph_copies = gpu::cuda_graph_copies();
  std::vector<char> expected = random_bytes(kBytes, 6);
  ASSERT_EQ(device()->copy(b.at(0), expected.data(), kBytes), Status::kOk);
  // (source offset, destination offset, bytes): one call after another on
  // the same buffers, each with its own pointers.
  const std::size_t cases[][3] = {{0, 0, 8},     {1, 3, 13},       {7, 0, 1},     {5, 17, 4099},
                                  {0, 9, 65536}, {3, 3, 262147},   {16, 48, 16},  {11, 2, 1 << 20}};
  int device_to_device = 0;
  for (const auto& c : cases) {
    ASSERT_EQ(device()->copy(b.at(c[1]), a.at(c[0]), c[2]), Status::kOk);
    std::memcpy(expected.data() + c[1], data.data() + c[0], c[2]);
    ++device_to_device;
    EXPECT_EQ(b.read(), expected) << c[2] << " bytes from offset " << c[0] << " to " << c[1];
  }
  if (on_cuda())
    EXPECT_EQ(gpu::cuda_graph_copies(), graph_copies + device_to_device) << "device copies not through the graph";
  // Device to host at an odd offset.
  std::vector<char> host(101, 0);
  ASSERT_EQ(device()->copy(host.data() + 1, b.at(7), 99), Status::kOk);
  EXPECT_EQ(std::memcmp(host.data() + 1, expected.data() + 7, 99), 0);
}

// On CUDA a blocking copy waits for the copies queued before it on the
// engine's (blocking) streams, as cudaMemcpy on the legacy stream does: here
// it reads what a 64 MiB copy still in flight writes.
TEST(DeviceCopy, OrderedAfterCopiesQueuedBefore) {
  if (!on_cuda()) GTEST_SKIP() << "the emulated device's blocking copy does not wait for its streams";
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  DeviceMemory source(kBytes), target(64);
  void* pinned = nullptr;
  ASSERT_EQ(device()->pinned_alloc(kBytes, &pinned), Status::kOk);
  gpu::Stream stream = nullptr;
  ASSERT_EQ(device()->stream_create(&stream), Status::kOk);
  for (unsigned round = 0; round < 4; ++round) {
    const std::vector<char> zeros(kBytes, 0);
    ASSERT_EQ(device()->copy(source.at(0), zeros.data(), kBytes), Status::kOk);
    const std::vector<char> data = random_bytes(kBytes, 40 + round);
    std::memcpy(pinned, data.data(), kBytes);
    ASSERT_EQ(device()->copy_async(source.at(0), pinned, kBytes, stream), Status::kOk);
    // The last bytes of the source: written last.
    ASSERT_EQ(device()->copy(target.at(0), source.at(kBytes - 64), 64), Status::kOk);
    EXPECT_EQ(target.read(), std::vector<char>(data.end() - 64, data.end())) << "round " << round;
    ASSERT_EQ(device()->stream_synchronize(stream), Status::kOk);
  }
  EXPECT_TRUE(ferry::ok(device()->stream_destroy(stream)));
  EXPECT_TRUE(ferry::ok(device()->pinned_free(pinned)));
}

// Copies that repeat (the same pointers and size) and ones that differ, more
// of them than the CUDA backend keeps copies ready for, each with new data.
TEST(DeviceCopy, RepeatedCopiesAmongNewOnesStayRight) {
  constexpr std::size_t kBytes = 1 << 16;
  DeviceMemory source(kBytes), target(kBytes);
  struct Copy {
    std::size_t from, to, bytes;
  };
  std::vector<Copy> copies;
  for (std::size_t i = 0; i < 13; ++i) copies.push_back({i * 7, i * 4096 + i, 1 + i * 301});
  std::mt19937 rng(3);
  int checked = 0;
  for (int round = 0; round < 4; ++round) {
    std::vector<std::size_t> order(copies.size() * 2);
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i % copies.size();
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t which : order) {
      const Copy& c = copies[which];
      const std::vector<char> data = random_bytes(c.bytes, 100 * round + checked);
      ASSERT_EQ(device()->copy(source.at(c.from), data.data(), c.bytes), Status::kOk);
      ASSERT_EQ(device()->copy(target.at(c.to), source.at(c.from), c.bytes), Status::kOk);
      const std::vector<char> all = target.read();
      ASSERT_EQ(std::memcmp(all.data() + c.to, data.data(), c.bytes), 0)
          << "copy " << which << " (" << c.bytes << " bytes) in round " << round;
      ++checked;
    }
  }
}

TEST(DeviceCopy, ManyThreadsAtOnce) {
  constexpr int kThreads = 6;
  constexpr int kCopies = 200;
  constexpr std::size_t kBytes = 4096;
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ASSERT_EQ(device()->set_device(0), Status::kOk);
      DeviceMemory source(kBytes), target(kBytes);
      for (int i = 0; i < kCopies; ++i) {
        const std::size_t bytes = 1 + (i * 977 + t * 131) % (kBytes - 1);
        const std::vector<char> data = random_bytes(bytes, t * 1000 + i);
        ASSERT_EQ(device()->copy(source.at(0), data.data(), bytes), Status::kOk);
        ASSERT_EQ(device()->copy(target.at(0), source.at(0), bytes), Status::kOk);
        const std::vector<char> back = target.read();
        wrong[t] += std::memcmp(back.data(), data.data(), bytes) != 0;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

// GPUDirect RDMA's first step (the ib provider registers what this gives):
// on CUDA, device memory at an unaligned offset exports as a dma-buf whose
// offset points at it; the emulated device has none.
TEST(DeviceDmaBuf, DeviceMemoryExportsForANetworkDevice) {
  void* memory = nullptr;
  ASSERT_EQ(device()->device_alloc(3 << 20, &memory), Status::kOk);
  int fd = -1;
  std::uint64_t offset = 0;
  const char* start = static_cast<char*>(memory) + 4096 + 100;
  const Status exported = device()->export_dmabuf(start, 1 << 20, &fd, &offset);
  if (on_cuda()) {
    ASSERT_EQ(exported, Status::kOk);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(offset, reinterpret_cast<std::uintptr_t>(start) % static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE)));
    struct stat st {};
    EXPECT_EQ(fstat(fd, &st), 0);
    close(fd);
  } else {
    EXPECT_EQ(exported, Status::kUnsupported);
  }
  ASSERT_EQ(device()->device_free(memory), Status::kOk);
}

}  // namespace
}  // namespace ferry
