// The ib provider's parts that run without an RDMA device: which ports
// FERRY_IB_HCA chooses, the checks on a peer's endpoint, the registration
// cache (over a registrar that stands for the device's protection domain),
// and what the loader says on a machine without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/transport/ib_endpoint.h"
#include "engine/transport/registration_cache.h"
#ifdef FERRY_HAVE_IBVERBS
#include "engine/transport/ib_verbs.h"
#endif

namespace ferry {
namespace {

#ifdef FERRY_HAVE_IBVERBS
std::vector<std::string> names(const std::vector<IbPort>& ports) {
  std::vector<std::string> out;
  for (const IbPort& p : ports) out.push_back(p.device + ":" + std::to_string(p.port));
  return out;
}

TEST(IbPorts, FerryIbHcaChoosesAsNcclIbHcaDoes) {
  const std::vector<IbPort> ports = {
      {"mlx5_0", 1, true, false, 4096}, {"mlx5_1", 1, true, true, 4096}, {"mlx5_10", 1, false, false, 4096},
      {"mlx4_0", 2, true, false, 2048}};
  using Names = std::vector<std::string>;
  std::string error;
  EXPECT_EQ(names(choose_ib_ports(ports, "", &error)), (Names{"mlx5_0:1", "mlx5_1:1", "mlx4_0:2"}));
  EXPECT_EQ(names(choose_ib_ports(ports, "mlx5", &error)), (Names{"mlx5_0:1", "mlx5_1:1"}));
  EXPECT_EQ(names(choose_ib_ports(ports, "mlx5_1", &error)), (Names{"mlx5_1:1"}));
  EXPECT_EQ(names(choose_ib_ports(ports, "=mlx5_1", &error)), (Names{"mlx5_1:1"}));
  EXPECT_EQ(names(choose_ib_ports(ports, "^mlx5_0", &error)), (Names{"mlx5_1:1", "mlx4_0:2"}));
  EXPECT_EQ(names(choose_ib_ports(ports, " mlx4_0:2 , mlx5_0 ", &error)), (Names{"mlx5_0:1", "mlx4_0:2"}));
  EXPECT_TRUE(error.empty()) << error;
  // Nothing chosen: the error names what was asked for and what is there.
  EXPECT_TRUE(choose_ib_ports(ports, "mlx4_0:1", &error).empty());
  EXPECT_NE(error.find("FERRY_IB_HCA=mlx4_0:1"), std::string::npos) << error;
  EXPECT_NE(error.find("mlx5_10:1 (down)"), std::string::npos) << error;
  error.clear();
  EXPECT_TRUE(choose_ib_ports(ports, "=mlx5", &error).empty());
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_TRUE(choose_ib_ports({}, "", &error).empty());
  EXPECT_NE(error.find("present: none"), std::string::npos) << error;
}

// A rank takes a port nearest its GPU where the topology names them, rank
// modulo their number among equals; where FERRY_IB_HCA allows none of them,
// or nothing is known, any allowed port, rank modulo their number.
TEST(IbPorts, EachRankTakesAPortNearestItsGpu) {
  std::vector<IbPort> ports;
  for (int d = 0; d < 4; ++d) ports.push_back({"mlx5_" + std::to_string(d), 1, true, false, 4096});
  for (int rank = 0; rank < 8; ++rank) EXPECT_EQ(pick_ib_port(ports, {"mlx5_2:1"}, rank).device, "mlx5_2");
  EXPECT_EQ(pick_ib_port(ports, {"mlx5_1:1", "mlx5_3:1"}, 0).device, "mlx5_1");
  EXPECT_EQ(pick_ib_port(ports, {"mlx5_1:1", "mlx5_3:1"}, 1).device, "mlx5_3");
  EXPECT_EQ(pick_ib_port(ports, {"mlx5_1:1", "mlx5_3:1"}, 2).device, "mlx5_1");
  // A port of another number on the nearest device is not the nearest port.
  EXPECT_EQ(pick_ib_port(ports, {"mlx5_2:2"}, 1).device, "mlx5_1");
  std::string error;
  const std::vector<IbPort> allowed = choose_ib_ports(ports, "^mlx5_2", &error);
  ASSERT_EQ(allowed.size(), 3u);
  bool nearest = true;
  EXPECT_EQ(pick_ib_port(allowed, {"mlx5_2:1"}, 1, &nearest).device, "mlx5_1");
  EXPECT_FALSE(nearest);
  EXPECT_EQ(pick_ib_port(ports, {"mlx5_2:1"}, 1, &nearest).device, "mlx5_2");
  EXPECT_TRUE(nearest);
  EXPECT_EQ(pick_ib_port(ports, {}, 6).device, "mlx5_2");
}

TEST(IbPorts, AMachineWithoutADeviceSaysWhy) {
  std::string why;
  const std::vector<IbPort> ports = ib_ports(&why);
  if (!ports.empty()) GTEST_SKIP() << "this machine has RDMA ports";
  EXPECT_FALSE(why.empty());
}
#endif

IbEndpoint valid_endpoint(bool ethernet) {
  IbEndpoint e = make_ib_endpoint();
  e.queue_pairs = 2;
  e.qpn[0] = 0x11;
  e.qpn[1] = 0xFFFFFF;
  e.psn = 0x123456;
  e.port = 1;
  e.ethernet = ethernet;
  if (ethernet) {
    e.gid[10] = 0xff;
  } else {
    e.lid = 7;
  }
  e.mtu_bytes = 4096;
  return e;
}

TEST(IbEndpoint, APeersEndpointIsCheckedBeforeUse) {
  const char* why = nullptr;
  EXPECT_EQ(check_ib_endpoint(valid_endpoint(false), false, &why), Status::kOk);
  EXPECT_EQ(check_ib_endpoint(valid_endpoint(true), true, &why), Status::kOk);
  struct Broken {
    const char* what;
    void (*breaks)(IbEndpoint*);
  } cases[] = {
      {"magic", [](IbEndpoint* e) { e->magic = 0; }},
      {"version", [](IbEndpoint* e) { e->version = 9; }},
      {"no queue pair", [](IbEndpoint* e) { e->queue_pairs = 0; }},
      {"too many queue pairs", [](IbEndpoint* e) { e->queue_pairs = kIbMaxQueuePairs + 1; }},
      {"queue pair 0", [](IbEndpoint* e) { e->qpn[1] = 0; }},
      {"queue pair past 24 bits", [](IbEndpoint* e) { e->qpn[0] = 0x1000000; }},
      {"psn past 24 bits", [](IbEndpoint* e) { e->psn = 0x1000000; }},
      {"MTU 3000", [](IbEndpoint* e) { e->mtu_bytes = 3000; }},
      {"MTU 8192", [](IbEndpoint* e) { e->mtu_bytes = 8192; }},
      {"no LID", [](IbEndpoint* e) { e->lid = 0; }},
      {"RoCE peer", [](IbEndpoint* e) { e->ethernet = 1; }},
  };
  for (const Broken& c : cases) {
    IbEndpoint e = valid_endpoint(false);
    c.breaks(&e);
    why = nullptr;
    EXPECT_EQ(check_ib_endpoint(e, false, &why), Status::kInvalidArgument) << c.what;
    EXPECT_NE(why, nullptr) << c.what;
  }
  IbEndpoint no_gid = valid_endpoint(true);
  std::fill(no_gid.gid, no_gid.gid + 16, 0);
  EXPECT_EQ(check_ib_endpoint(no_gid, true, &why), Status::kInvalidArgument);
  IbEndpoint small = valid_endpoint(false);
  small.mtu_bytes = 1024;
  EXPECT_EQ(common_mtu(valid_endpoint(false), small), 1024u);
}

// Stands for the device's protection domain: hands out keys, records what
// is registered now.
class RecordingRegistrar final : public Registrar {
 public:
  Status register_range(Registration* range) override {
    range->lkey = range->rkey = ++next_key_;
    live_.push_back(*range);
    ++registered_;
    return Status::kOk;
  }
  void deregister_range(const Registration& range) override {
    live_.erase(std::find_if(live_.begin(), live_.end(), [&](const Registration& r) { return r.lkey == range.lkey; }));
  }
  std::vector<Registration> live_;
  int registered_ = 0;

 private:
  std::uint32_t next_key_ = 0;
};

TEST(RegistrationCache, ReusesCoveringRangesInWholePages) {
  RecordingRegistrar registrar;
  RegistrationCache cache(registrar, 4);
  std::vector<char> memory(5 * 4096);
  char* page = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(memory.data()) + 4095) / 4096 * 4096);
  const Registration* a = nullptr;
  ASSERT_EQ(cache.acquire(page + 100, 5000, false, &a), Status::kOk);
  EXPECT_EQ(a->base, reinterpret_cast<std::uintptr_t>(page));
  EXPECT_EQ(a->bytes, 2u * 4096);
  const Registration* b = nullptr;
  ASSERT_EQ(cache.acquire(page + 4096, 10, false, &b), Status::kOk);  // within a
  EXPECT_EQ(b, a);
  const Registration* device = nullptr;
  ASSERT_EQ(cache.acquire(page + 4096, 10, true, &device), Status::kOk);  // device memory: its own
  EXPECT_NE(device, a);
  const Registration* wider = nullptr;
  ASSERT_EQ(cache.acquire(page, 3 * 4096, false, &wider), Status::kOk);  // past a: a new range
  EXPECT_NE(wider, a);
  EXPECT_EQ(registrar.registered_, 3);
  const RegistrationCache::Counts counts = cache.counts();
  EXPECT_EQ(counts.hits, 1u);
  EXPECT_EQ(counts.misses, 3u);
  const Registration* none = nullptr;
  EXPECT_EQ(cache.acquire(page, 0, false, &none), Status::kInvalidArgument);
  for (const Registration* r : {a, b, device, wider}) cache.release(r);
}

TEST(RegistrationCache, EvictsTheLeastRecentlyUsedFreeRange) {
  RecordingRegistrar registrar;
  RegistrationCache cache(registrar, 2);
  std::vector<char> memory(16 * 4096);
  auto at = [&](int page) { return memory.data() + page * 4096 + 4096; };
  const Registration *first = nullptr, *second = nullptr, *third = nullptr;
  ASSERT_EQ(cache.acquire(at(0), 10, false, &first), Status::kOk);
  ASSERT_EQ(cache.acquire(at(4), 10, false, &second), Status::kOk);
  // Both held: no room for a third.
  EXPECT_EQ(cache.acquire(at(8), 10, false, &third), Status::kOutOfMemory);
  const std::uint32_t first_key = first->lkey, second_key = second->lkey;
  cache.release(first);
  cache.release(second);
  const Registration* again = nullptr;
  ASSERT_EQ(cache.acquire(at(0), 10, false, &again), Status::kOk);  // first is now the most recent
  cache.release(again);
  ASSERT_EQ(cache.acquire(at(8), 10, false, &third), Status::kOk);
  EXPECT_EQ(cache.counts().evictions, 1u);
  auto live = [&](std::uint32_t key) {
    return std::any_of(registrar.live_.begin(), registrar.live_.end(),
                       [&](const Registration& r) { return r.lkey == key; });
  };
  EXPECT_TRUE(live(first_key));
  EXPECT_FALSE(live(second_key));
  cache.release(third);
}

TEST(RegistrationCache, FreedMemoryLeavesTheCache) {
  RecordingRegistrar registrar;
  {
    RegistrationCache cache(registrar, 8);
    std::vector<char> memory(8 * 4096);
    const Registration *held = nullptr, *idle = nullptr;
    ASSERT_EQ(cache.acquire(memory.data() + 4096, 10, false, &held), Status::kOk);
    ASSERT_EQ(cache.acquire(memory.data() + 5 * 4096, 10, false, &idle), Status::kOk);
    cache.release(idle);
    cache.invalidate(memory.data(), memory.size());
    EXPECT_EQ(registrar.live_.size(), 1u);  // the held one stays until released
    const Registration* after = nullptr;
    ASSERT_EQ(cache.acquire(memory.data() + 4096, 10, false, &after), Status::kOk);
    EXPECT_NE(after, held);  // a stale range is never handed out again
    cache.release(held);
    EXPECT_EQ(registrar.live_.size(), 1u);
    cache.release(after);
  }
  EXPECT_TRUE(registrar.live_.empty());  // the cache deregisters what it kept
}

}  // namespace
}  // namespace ferry
