// The proxy GDA's ring protocol with host threads as producers: rings that
// fill (producers wait, nothing is overwritten), wrap around many times,
// keep each producer's order, and count completions that quiet waits for;
// values of fetching operations reach their producers, and one not yet
// taken is never overwritten by a later ticket of its result slot; GPU
// producers' copy of the consumer's words in device memory.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/transport/gda/proxy.h"
#include "unit_test_device.h"

namespace ferry::gda {
namespace {

// Applies each descriptor to a window in host memory, as a target would,
// and records what it saw; can be held (the ring then fills) or made to
// fail at a ticket.
class WindowExecutor : public GdaExecutor {
 public:
  explicit WindowExecutor(std::size_t window_bytes) : window(window_bytes, 0) {}

  // Applies d at once; progress() reports it.
  Status start(const GdaDescriptor& d, int ring, std::uint64_t ticket) override {
    while (held.load(std::memory_order_acquire)) std::this_thread::yield();
    if (ticket == fail_at) return Status::kUnavailable;
    std::lock_guard<std::mutex> lock(mutex);
    switch (static_cast<GdaOp>(d.op)) {
      case GdaOp::kPut:
      case GdaOp::kPutSignal:
        std::memcpy(window.data() + d.offset, reinterpret_cast<const void*>(d.source), d.bytes);
        if (static_cast<GdaOp>(d.op) == GdaOp::kPut) break;
        [[fallthrough]];
      case GdaOp::kSignal: {
        std::uint64_t word = 0;
        std::memcpy(&word, window.data() + d.signal_offset, 8);
        word = static_cast<GdaSignalOp>(d.signal_op) == GdaSignalOp::kAdd ? word + d.value : d.value;
        std::memcpy(window.data() + d.signal_offset, &word, 8);
        break;
      }
      case GdaOp::kAtomicAdd:
      case GdaOp::kFetchAdd: {
        std::uint64_t word = 0;
        std::memcpy(&word, window.data() + d.offset, 8);
        // A fetch-add leaves the old value where the proxy said.
        if (static_cast<GdaOp>(d.op) == GdaOp::kFetchAdd) std::memcpy(reinterpret_cast<void*>(d.source), &word, 8);
        word += d.value;
        std::memcpy(window.data() + d.offset, &word, 8);
        break;
      }
      default:
        return Status::kInvalidArgument;
    }
    seen.push_back({ring, ticket, d.producer, d.value});
    applied.push_back({ring, ticket});
    return Status::kOk;
  }

  Status progress(const std::function<void(int, std::uint64_t)>& finished) override {
    for (const auto& [ring, ticket] : applied) finished(ring, ticket);
    applied.clear();
    return Status::kOk;
  }

  struct Seen {
    int ring;
    std::uint64_t ticket;
    std::uint32_t producer;
    std::uint64_t value;
  };
  std::mutex mutex;
  std::vector<char> window;
  std::vector<Seen> seen;
  std::vector<std::pair<int, std::uint64_t>> applied;  // not yet reported
  std::atomic<bool> held{false};
  std::uint64_t fail_at = kRingFailed;
};

GdaDescriptor signal_add(std::uint32_t producer, std::uint64_t signal_offset, std::uint64_t value) {
  GdaDescriptor d{};
  d.op = static_cast<std::uint8_t>(GdaOp::kSignal);
  d.signal_op = static_cast<std::uint8_t>(GdaSignalOp::kAdd);
  d.signal_offset = signal_offset;
  d.value = value;
  d.producer = producer;
  return d;
}

std::uint64_t load(const std::uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }

// A ring of GPU producers as a host thread playing one reaches it: its
// device memory through the emulated device's host view.
GdaRing seen_from_host(gpu::Backend* device, GdaRing ring) {
  ring.tickets = static_cast<std::uint64_t*>(device->host_view(ring.tickets));
  ring.seen_words = static_cast<const GdaRingWords*>(device->host_view(ring.seen_words));
  ring.seen_results = static_cast<const GdaResult*>(device->host_view(ring.seen_results));
  return ring;
}

TEST(GdaRing, ManyProducersWrapAroundAndKeepEachOnesOrder) {
  WindowExecutor executor(64);
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(8, Producers::kHost, &ring), Status::kOk);
  proxy.start();
  constexpr int kProducers = 4, kPosts = 5000;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      std::uint64_t last = 0;
      for (int i = 0; i < kPosts; ++i) {
        last = post(ring, signal_add(p, 8 * p, i + 1));
        ASSERT_NE(last, kRingFailed);
      }
      ASSERT_TRUE(wait_completed(ring, last));  // quiet
    });
  for (auto& t : producers) t.join();
  proxy.stop();
  ASSERT_EQ(proxy.status(), Status::kOk);
  ASSERT_EQ(executor.seen.size(), std::size_t{kProducers} * kPosts);
  // Tickets in order, every producer's values in the order it posted them.
  std::vector<std::uint64_t> next_value(kProducers, 1);
  for (std::size_t i = 0; i < executor.seen.size(); ++i) {
    const auto& s = executor.seen[i];
    EXPECT_EQ(s.ticket, i);
    ASSERT_EQ(s.value, next_value[s.producer]) << "producer " << s.producer;
    ++next_value[s.producer];
  }
  for (int p = 0; p < kProducers; ++p) {
    std::uint64_t sum = 0;
    std::memcpy(&sum, executor.window.data() + 8 * p, 8);
    EXPECT_EQ(sum, std::uint64_t{kPosts} * (kPosts + 1) / 2);
  }
  EXPECT_EQ(load(&ring.words->completed), std::uint64_t{kProducers} * kPosts);
}

TEST(GdaRing, AFullRingMakesProducersWaitAndLosesNothing) {
  WindowExecutor executor(64);
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(4, Producers::kHost, &ring), Status::kOk);
  executor.held = true;  // the proxy takes one descriptor and holds it
  proxy.start();
  std::atomic<int> posted{0};
  std::thread producer([&] {
    for (int i = 0; i < 12; ++i) {
      ASSERT_NE(post(ring, signal_add(0, 0, 1)), kRingFailed);
      posted.fetch_add(1);
    }
  });
  // One in the proxy's hands, four in the ring: the sixth post waits.
  for (int i = 0; i < 2000 && posted.load() < 5; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(posted.load(), 5);
  EXPECT_EQ(load(&ring.words->completed), 0u);
  executor.held = false;
  producer.join();
  ASSERT_TRUE(wait_completed(ring, 11));
  proxy.stop();
  std::uint64_t sum = 0;
  std::memcpy(&sum, executor.window.data(), 8);
  EXPECT_EQ(sum, 12u);
}

TEST(GdaRing, ASourceIsFreeOnceTheProxyStartedItsDescriptor) {
  WindowExecutor executor(64);
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(4, Producers::kHost, &ring), Status::kOk);
  executor.held = true;  // start() has not read the source yet
  proxy.start();
  const std::uint64_t ticket = post(ring, signal_add(0, 0, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(load(&ring.words->started), 0u);
  executor.held = false;
  EXPECT_TRUE(wait_started(ring, ticket));
  EXPECT_TRUE(wait_completed(ring, ticket));
  proxy.stop();
}

TEST(GdaRing, PutsLandBeforeTheSignalThatFollowsThem) {
  WindowExecutor executor(1 << 16);
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(16, Producers::kHost, &ring), Status::kOk);
  proxy.start();
  std::vector<unsigned char> source(4093);  // odd size, unaligned offsets below
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i * 7 + 3);
  for (int round = 0; round < 50; ++round) {
    GdaDescriptor put{};
    put.op = static_cast<std::uint8_t>(GdaOp::kPutSignal);
    put.source = reinterpret_cast<std::uintptr_t>(source.data() + round);
    put.offset = 8 + round * 3;
    put.bytes = source.size() - round;
    put.signal_offset = 0;
    put.signal_op = static_cast<std::uint8_t>(GdaSignalOp::kSet);
    put.value = round + 1;
    const std::uint64_t ticket = post(ring, put);
    ASSERT_TRUE(wait_completed(ring, ticket));
    std::lock_guard<std::mutex> lock(executor.mutex);
    std::uint64_t signal = 0;
    std::memcpy(&signal, executor.window.data(), 8);
    ASSERT_EQ(signal, std::uint64_t(round + 1));
    ASSERT_EQ(std::memcmp(executor.window.data() + put.offset, source.data() + round, put.bytes), 0);
  }
  proxy.stop();
}

TEST(GdaRing, AFailedOperationReleasesWaitingProducers) {
  WindowExecutor executor(64);
  executor.fail_at = 3;
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(4, Producers::kHost, &ring), Status::kOk);
  proxy.start();
  std::uint64_t last = 0;
  int failed_posts = 0;
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t ticket = post(ring, signal_add(0, 0, 1));
    if (ticket == kRingFailed) ++failed_posts;
    else last = ticket;
  }
  EXPECT_FALSE(wait_completed(ring, last));  // quiet returns, with the failure
  EXPECT_GT(failed_posts, 0);                // the ring stopped taking posts
  EXPECT_EQ(proxy.status(), Status::kUnavailable);
  // Once the proxy's thread has ended (it reports what finished before the
  // failure on its way out): tickets 0..2 finished, no more.
  proxy.stop();
  EXPECT_EQ(load(&ring.words->completed), 3u);
}

TEST(GdaRing, StoppingReleasesProducersThatWaitForRoom) {
  WindowExecutor executor(64);
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(2, Producers::kHost, &ring), Status::kOk);
  // Never started: two posts fill the ring, the third waits until stop.
  EXPECT_EQ(post(ring, signal_add(0, 0, 1)), 0u);
  EXPECT_EQ(post(ring, signal_add(0, 0, 1)), 1u);
  proxy.start();
  proxy.stop();
  EXPECT_EQ(load(&ring.words->completed), 2u);  // what was published was drained
  EXPECT_EQ(post(ring, signal_add(0, 0, 1)), 2u);
  EXPECT_EQ(post(ring, signal_add(0, 0, 1)), 3u);
  EXPECT_EQ(post(ring, signal_add(0, 0, 1)), kRingFailed);  // full, and nobody drains it
}

GdaDescriptor fetch_add(std::uint32_t producer, std::uint64_t offset, std::uint64_t value) {
  GdaDescriptor d{};
  d.op = static_cast<std::uint8_t>(GdaOp::kFetchAdd);
  d.offset = offset;
  d.value = value;
  d.producer = producer;
  return d;
}

// Each of `producers` host threads fetch-adds 1 to the word at offset
// `posts` times; the old values each got back, in order.
std::vector<std::vector<std::uint64_t>> fetch_adds(const GdaRing& ring, int producers, int posts,
                                                   std::uint64_t offset) {
  std::vector<std::vector<std::uint64_t>> fetched(producers);
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&, p] {
      for (int i = 0; i < posts; ++i) {
        const std::uint64_t ticket = post(ring, fetch_add(p, offset, 1));
        ASSERT_NE(ticket, kRingFailed);
        std::uint64_t old = 0;
        ASSERT_TRUE(take_result(ring, ticket, &old));
        fetched[p].push_back(old);
      }
    });
  for (auto& t : threads) t.join();
  return fetched;
}

// The old values all producers got back are 0 .. n-1, each once, rising
// for each producer.
void expect_each_value_once(const std::vector<std::vector<std::uint64_t>>& fetched) {
  std::size_t total = 0;
  for (const auto& mine : fetched) total += mine.size();
  std::vector<bool> seen(total, false);
  for (std::size_t p = 0; p < fetched.size(); ++p)
    for (std::size_t i = 0; i < fetched[p].size(); ++i) {
      const std::uint64_t old = fetched[p][i];
      ASSERT_LT(old, seen.size());
      EXPECT_FALSE(seen[old]) << "old value " << old << " returned twice";
      seen[old] = true;
      if (i > 0) EXPECT_GT(old, fetched[p][i - 1]) << "producer " << p;
    }
}

TEST(GdaRing, FetchedValuesReachTheirProducersAcrossWrapArounds) {
  WindowExecutor executor(64);
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(8, Producers::kHost, &ring), Status::kOk);
  proxy.start();
  const auto fetched = fetch_adds(ring, 4, 3000, 16);
  proxy.stop();
  ASSERT_EQ(proxy.status(), Status::kOk);
  expect_each_value_once(fetched);
}

TEST(GdaRing, AValueNotYetTakenIsNeverOverwritten) {
  WindowExecutor executor(64);
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(4, Producers::kHost, &ring), Status::kOk);
  proxy.start();
  // Twice the ring's capacity: tickets 4..7 share result slots with 0..3,
  // whose values nobody has taken yet.
  for (int i = 0; i < 8; ++i) ASSERT_EQ(post(ring, fetch_add(0, 0, 10)), std::uint64_t(i));
  ASSERT_TRUE(wait_completed(ring, 7));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(load(&ring.results[i].ready), std::uint64_t(i + 1)) << "slot " << i;
    EXPECT_EQ(ring.results[i].value, std::uint64_t(10 * i)) << "slot " << i;
  }
  // Taking a value frees its slot for the ticket one pass later.
  for (int i = 0; i < 8; ++i) {
    std::uint64_t old = 0;
    ASSERT_TRUE(take_result(ring, i, &old));
    EXPECT_EQ(old, std::uint64_t(10 * i));
  }
  proxy.stop();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(load(&ring.results[i].ready), 0u);
}

TEST(GdaRing, AProducerWaitingForAValueReturnsWhenTheProxyFails) {
  WindowExecutor executor(64);
  executor.fail_at = 1;
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(4, Producers::kHost, &ring), Status::kOk);
  proxy.start();
  std::uint64_t old = 99;
  EXPECT_TRUE(take_result(ring, post(ring, fetch_add(0, 0, 5)), &old));
  EXPECT_EQ(old, 0u);
  EXPECT_FALSE(take_result(ring, post(ring, fetch_add(0, 0, 5)), &old));
  EXPECT_EQ(old, 0u);
  proxy.stop();
}

// The watchdog: a proxy held in one call of its executor (a copy that never
// returns), or whose started operations never finish (a target that never
// answers), fails its rings after the stall limit, so a producer waiting on
// them returns; a proxy with nothing to do is left alone.
class NeverFinishing : public GdaExecutor {
 public:
  Status start(const GdaDescriptor&, int, std::uint64_t) override { return Status::kOk; }
  Status progress(const std::function<void(int, std::uint64_t)>&) override { return Status::kOk; }
};

// One operation posted through a proxy with a 200 ms stall limit: its
// producer's wait returns, failed, within seconds.
void expect_failed_by_the_watchdog(GdaExecutor& executor, const std::function<void()>& before_stop,
                                   Producers producers = Producers::kHost) {
  GdaProxy proxy(testing::unit_test_device(), &executor, std::chrono::milliseconds(200));
  GdaRing added{};
  ASSERT_EQ(proxy.add_ring(4, producers, &added, Polls::kDeviceCopy), Status::kOk);
  const GdaRing ring =
      producers == Producers::kDevice ? seen_from_host(testing::unit_test_device(), added) : added;
  proxy.start();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(wait_completed(ring, post(ring, signal_add(0, 0, 1))));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(proxy.status(), Status::kTimeout);
  before_stop();
  proxy.stop();
}

TEST(GdaRing, AProxyHeldInItsExecutorFailsItsRingsAfterTheStallLimit) {
  WindowExecutor executor(64);
  executor.held = true;
  // Released once failed: the call returns and the proxy's thread ends.
  expect_failed_by_the_watchdog(executor, [&] { executor.held = false; });
}

// The proxy's thread, held, cannot mark the device copy failed: producers
// find the failure in the host's word.
TEST(GdaRing, DeviceProducersSeeAHeldProxyFailThroughTheHostsWord) {
  if (testing::unit_test_device()->execution_site() != gpu::ExecutionSite::kHost)
    GTEST_SKIP() << "host threads cannot read this device's memory";
  WindowExecutor executor(64);
  executor.held = true;
  expect_failed_by_the_watchdog(executor, [&] { executor.held = false; }, Producers::kDevice);
}

TEST(GdaRing, OperationsThatNeverFinishFailTheirRingsAfterTheStallLimit) {
  NeverFinishing executor;
  expect_failed_by_the_watchdog(executor, [] {});
}

TEST(GdaRing, AnIdleProxyOutlivesItsStallLimit) {
  WindowExecutor executor(64);
  GdaProxy proxy(testing::unit_test_device(), &executor, std::chrono::milliseconds(100));
  GdaRing ring{};
  ASSERT_EQ(proxy.add_ring(4, Producers::kHost, &ring), Status::kOk);
  proxy.start();
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(wait_completed(ring, post(ring, signal_add(0, 0, 1))));
  }
  EXPECT_EQ(proxy.status(), Status::kOk);
  proxy.stop();
}

// GPU producers (FERRY_GDA_POLL=device) read the consumer's words and the
// returned values from a copy in device memory the proxy keeps current,
// and free result slots in host memory: fetched values still reach each
// producer once, in order, across many passes over a small ring; quiet
// still waits for completion.
TEST(GdaRing, DeviceProducersReadTheConsumersCopyInDeviceMemory) {
  gpu::Backend* device = testing::unit_test_device();
  if (device->execution_site() != gpu::ExecutionSite::kHost)
    GTEST_SKIP() << "host threads cannot read this device's memory";
  WindowExecutor executor(64);
  GdaProxy proxy(device, &executor);
  GdaRing added{};
  ASSERT_EQ(proxy.add_ring(8, Producers::kDevice, &added, Polls::kDeviceCopy), Status::kOk);
  EXPECT_NE(static_cast<const void*>(added.seen_words), static_cast<const void*>(added.words));
  EXPECT_NE(static_cast<const void*>(added.seen_results), static_cast<const void*>(added.results));
  const GdaRing ring = seen_from_host(device, added);
  proxy.start();
  constexpr int kProducers = 4, kPosts = 300;
  const auto fetched = fetch_adds(ring, kProducers, kPosts, 0);
  ASSERT_TRUE(wait_all_completed(ring));
  EXPECT_EQ(load(&ring.seen_words->completed), std::uint64_t{kProducers} * kPosts);
  proxy.stop();
  ASSERT_EQ(proxy.status(), Status::kOk);
  expect_each_value_once(fetched);
  // Every slot was freed where the proxy looks.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(load(&ring.results[i].ready), 0u) << "slot " << i;
  // Stopped: the copy says failed, so a late producer returns.
  EXPECT_EQ(__atomic_load_n(&ring.seen_words->failed, __ATOMIC_ACQUIRE), 1u);
}

TEST(GdaRing, CapacityIsAPowerOfTwo) {
  WindowExecutor executor(64);
  GdaProxy proxy(testing::unit_test_device(), &executor);
  GdaRing ring{};
  EXPECT_EQ(proxy.add_ring(0, Producers::kHost, &ring), Status::kInvalidArgument);
  EXPECT_EQ(proxy.add_ring(12, Producers::kHost, &ring), Status::kInvalidArgument);
  EXPECT_EQ(proxy.add_ring(16, Producers::kDevice, &ring), Status::kOk);
}

}  // namespace
}  // namespace ferry::gda
