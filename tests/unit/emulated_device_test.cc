#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "engine/gpu/gpu.h"

namespace ferry::gpu {
namespace {

class EmulatedDevice : public ::testing::Test {
 protected:
  Backend* device = emulated_backend();
};

TEST_F(EmulatedDevice, CopiesRoundTripAtUnalignedOffsets) {
  void* buffer = nullptr;
  ASSERT_EQ(device->device_alloc(4099, &buffer), Status::kOk);
  std::vector<std::uint8_t> in(4000), out(4000, 0);
  std::iota(in.begin(), in.end(), 7);
  char* at = static_cast<char*>(buffer) + 3;
  ASSERT_EQ(copy(at, in.data(), in.size()), Status::kOk);
  ASSERT_EQ(copy(out.data(), at, out.size()), Status::kOk);
  EXPECT_EQ(in, out);
  EXPECT_EQ(device->device_free(buffer), Status::kOk);
}

TEST_F(EmulatedDevice, ClassifiesWholeAllocationAndForgetsItWhenFreed) {
  void* buffer = nullptr;
  ASSERT_EQ(device->device_alloc(1000, &buffer), Status::kOk);
  const PointerInfo inside = classify(static_cast<char*>(buffer) + 999);
  EXPECT_EQ(inside.kind, MemoryKind::kDevice);
  EXPECT_EQ(inside.owner, BackendKind::kEmulated);
  EXPECT_EQ(inside.base, reinterpret_cast<std::uintptr_t>(buffer));
  EXPECT_EQ(inside.size, 1000u);
  int on_stack = 0;
  EXPECT_EQ(classify(&on_stack).kind, MemoryKind::kHost);
  ASSERT_EQ(device->device_free(buffer), Status::kOk);
  EXPECT_EQ(classify(buffer).kind, MemoryKind::kHost);
}

// Within a CallBuffers scope classify() answers from what the scope
// remembered (here even after the memory was freed, which MPI forbids during
// a call, to show where the answer comes from); outside it, from the device.
TEST_F(EmulatedDevice, CallBuffersRememberTheirClassificationForTheScope) {
  void* buffer = nullptr;
  ASSERT_EQ(device->device_alloc(256, &buffer), Status::kOk);
  int on_stack = 0;
  {
    CallBuffers call;
    EXPECT_EQ(CallBuffers::remember(buffer).kind, MemoryKind::kDevice);
    EXPECT_EQ(CallBuffers::remember(&on_stack).kind, MemoryKind::kHost);
    ASSERT_NE(CallBuffers::known(buffer), nullptr);
    EXPECT_EQ(CallBuffers::known(static_cast<char*>(buffer) + 1), nullptr) << "only the pointers given";
    ASSERT_EQ(device->device_free(buffer), Status::kOk);
    EXPECT_EQ(classify(buffer).kind, MemoryKind::kDevice);
    EXPECT_EQ(classify(buffer).size, 256u);
    {
      CallBuffers inner;  // nested: the outer scope's answers still hold
      EXPECT_EQ(classify(buffer).kind, MemoryKind::kDevice);
      EXPECT_EQ(classify(&on_stack).kind, MemoryKind::kHost);
    }
  }
  EXPECT_EQ(CallBuffers::known(buffer), nullptr);
  EXPECT_EQ(classify(buffer).kind, MemoryKind::kHost);
  // Without a scope, remember() only classifies.
  EXPECT_EQ(CallBuffers::remember(buffer).kind, MemoryKind::kHost);
  EXPECT_EQ(CallBuffers::known(buffer), nullptr);
}

TEST_F(EmulatedDevice, HostCodeTouchingDeviceMemoryFaultsLikeAGpuPointer) {
  void* buffer = nullptr;
  ASSERT_EQ(device->device_alloc(64, &buffer), Status::kOk);
  volatile int* p = static_cast<volatile int*>(buffer);
  EXPECT_DEATH({ (void)*p; }, "");
  EXPECT_TRUE(ferry::ok(device->device_free(buffer)));
}

TEST_F(EmulatedDevice, CopyPastTheEndOfAnAllocationFails) {
  void* buffer = nullptr;
  ASSERT_EQ(device->device_alloc(100, &buffer), Status::kOk);
  std::vector<char> host(200);
  EXPECT_NE(copy(host.data(), buffer, 200), Status::kOk);
  EXPECT_TRUE(ferry::ok(device->device_free(buffer)));
}

TEST_F(EmulatedDevice, AllocationBeyondTheLimitFailsCleanly) {
  void* buffer = reinterpret_cast<void*>(1);
  EXPECT_EQ(device->device_alloc(std::size_t{1} << 50, &buffer), Status::kOutOfMemory);
  EXPECT_EQ(buffer, nullptr);
}

TEST_F(EmulatedDevice, AnotherProcessSeesExportedMemory) {
  void* buffer = nullptr;
  ASSERT_EQ(device->device_alloc(8192, &buffer), Status::kOk);
  std::vector<int> values(2048);
  std::iota(values.begin(), values.end(), 100);
  ASSERT_EQ(copy(buffer, values.data(), 8192), Status::kOk);
  IpcHandle handle;
  ASSERT_EQ(device->ipc_export(buffer, &handle), Status::kOk);

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child maps the parent's memory through the handle, doubles it.
    void* mapped = nullptr;
    if (device->ipc_import(handle, &mapped) != Status::kOk || mapped == buffer) _exit(1);
    std::vector<int> seen(2048);
    if (copy(seen.data(), mapped, 8192) != Status::kOk) _exit(2);
    for (int& v : seen) v *= 2;
    if (copy(mapped, seen.data(), 8192) != Status::kOk) _exit(3);
    _exit(device->ipc_close(mapped) == Status::kOk ? 0 : 4);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::vector<int> back(2048);
  ASSERT_EQ(copy(back.data(), buffer, 8192), Status::kOk);
  for (int i = 0; i < 2048; ++i) ASSERT_EQ(back[i], 2 * (100 + i));
  EXPECT_TRUE(ferry::ok(device->device_free(buffer)));
}

TEST_F(EmulatedDevice, StreamsRunCopiesInOrderAndEventsTimeThem) {
  void* buffer = nullptr;
  ASSERT_EQ(device->device_alloc(1 << 20, &buffer), Status::kOk);
  Stream stream = nullptr;
  Event start = nullptr, end = nullptr;
  ASSERT_EQ(device->stream_create(&stream), Status::kOk);
  ASSERT_EQ(device->event_create(&start), Status::kOk);
  ASSERT_EQ(device->event_create(&end), Status::kOk);
  std::vector<char> a(1 << 20, 'a'), b(1 << 20, 'b'), out(1 << 20);
  ASSERT_EQ(device->event_record(start, stream), Status::kOk);
  ASSERT_EQ(device->copy_async(buffer, a.data(), a.size(), stream), Status::kOk);
  ASSERT_EQ(device->copy_async(buffer, b.data(), b.size(), stream), Status::kOk);
  ASSERT_EQ(device->copy_async(out.data(), buffer, out.size(), stream), Status::kOk);
  ASSERT_EQ(device->event_record(end, stream), Status::kOk);
  ASSERT_EQ(device->stream_synchronize(stream), Status::kOk);
  EXPECT_EQ(out, b);
  float ms = -1;
  ASSERT_EQ(device->event_elapsed_ms(start, end, &ms), Status::kOk);
  EXPECT_GE(ms, 0.0f);
  EXPECT_TRUE(ferry::ok(device->event_destroy(start)));
  EXPECT_TRUE(ferry::ok(device->event_destroy(end)));
  EXPECT_TRUE(ferry::ok(device->stream_destroy(stream)));
  EXPECT_TRUE(ferry::ok(device->device_free(buffer)));
}

// The stream memory operations cepush builds on: a wait holds back what is
// queued after it until the word reaches the value (compared modulo 2^32),
// a write lands after what was queued before it, and write_value_now frees
// a stream stuck in a wait.
TEST_F(EmulatedDevice, StreamWaitsAndWritesOrderWorkBetweenStreams) {
  ASSERT_TRUE(device->stream_memory_ops());
  void* memory = nullptr;
  ASSERT_EQ(device->device_alloc(4096 + (1 << 16), &memory), Status::kOk);
  auto* word = static_cast<std::uint32_t*>(memory);
  char* data = static_cast<char*>(memory) + 4096;
  const std::uint32_t start = 0xfffffff0u;  // the next values wrap around
  ASSERT_EQ(copy(word, &start, sizeof(start)), Status::kOk);
  Stream producer = nullptr, consumer = nullptr;
  ASSERT_EQ(device->stream_create(&producer), Status::kOk);
  ASSERT_EQ(device->stream_create(&consumer), Status::kOk);
  std::vector<char> sent(1 << 16), got(1 << 16, 0);
  std::iota(sent.begin(), sent.end(), 1);

  // The consumer queues its wait and its read first: 5 is past 0xfffffff0.
  ASSERT_EQ(device->stream_wait_value(consumer, word, 5), Status::kOk);
  ASSERT_EQ(device->copy_async(got.data(), data, got.size(), consumer), Status::kOk);
  bool done = true;
  ASSERT_EQ(device->stream_done(consumer, &done), Status::kOk);
  EXPECT_FALSE(done);
  ASSERT_EQ(device->copy_async(data, sent.data(), sent.size(), producer), Status::kOk);
  ASSERT_EQ(device->stream_write_value(producer, word, 5), Status::kOk);
  ASSERT_EQ(device->stream_synchronize(consumer), Status::kOk);
  EXPECT_EQ(got, sent);
  ASSERT_EQ(device->stream_done(consumer, &done), Status::kOk);
  EXPECT_TRUE(done);

  // A wait nobody will satisfy is freed by a write past every stream.
  ASSERT_EQ(device->stream_wait_value(consumer, word, 1000), Status::kOk);
  ASSERT_EQ(device->write_value_now(word, 1000 + (1u << 30)), Status::kOk);
  ASSERT_EQ(device->stream_synchronize(consumer), Status::kOk);

  EXPECT_TRUE(ferry::ok(device->stream_destroy(producer)));
  EXPECT_TRUE(ferry::ok(device->stream_destroy(consumer)));
  EXPECT_TRUE(ferry::ok(device->device_free(memory)));
}

}  // namespace
}  // namespace ferry::gpu
