// How the engine chooses the transport to each peer (TransportTable): from
// the ranks' identities, the topology's search and the transports the
// settings allow; and what the ranks' identities say about shared GPUs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/ranks.h"
#include "engine/core/transport_table.h"
#include "engine/gpu/gpu.h"
#include "engine/topology/search.h"
#include "engine/topology/topology_xml.h"

namespace ferry {
namespace {

std::string fixture(const std::string& name) { return std::string(FERRY_TOPOLOGY_FIXTURES) + "/" + name; }

// ---- the transport to each peer -------------------------------------------

constexpr auto kEmulated = static_cast<std::int32_t>(gpu::BackendKind::kEmulated);
constexpr auto kCuda = static_cast<std::int32_t>(gpu::BackendKind::kCuda);

std::vector<RankIdentity> one_machine(int n, std::int32_t backend) {
  std::vector<RankIdentity> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back({42, 1000 + r, backend, 1, backend != 0, 0, 0, backend == kCuda});
  return ranks;
}

SystemGraph load(const std::string& name) {
  SystemGraph graph;
  std::string error;
  EXPECT_EQ(load_topology_file(fixture(name), graph, &error), Status::kOk) << error;
  return graph;
}

// As discovery leaves it: GPUs that belong to no rank.
SystemGraph without_ranks(SystemGraph graph) {
  for (Node& node : graph.nodes) node.rank = -1;
  return graph;
}

constexpr AllowedTransports kAll{};
using Names = std::vector<std::string>;

// The transport TransportTable chooses to each rank, by name.
Names plan(int rank, const std::vector<RankIdentity>& ranks, const SystemGraph* topology,
           const AllowedTransports& allowed) {
  TransportTable table(allowed, nullptr, 0);
  table.plan(rank, ranks, topology);
  Names names;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) names.push_back(table.name_to(r));
  return names;
}

TEST(TopoPlan, FileRanksFollowTheSearch) {
  const SystemGraph sys = load("two_sockets_sys.xml"), nv18 = load("h200_nv18.xml");
  EXPECT_EQ(plan(0, one_machine(2, kEmulated), &sys, kAll), (Names{"self", "shm"}));
  EXPECT_EQ(plan(1, one_machine(2, kEmulated), &sys, kAll), (Names{"shm", "self"}));
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &nv18, kAll), (Names{"self", "p2p"}));
  const SystemGraph pcie = load("pcie_two_sockets.xml");
  EXPECT_EQ(plan(0, one_machine(4, kCuda), &pcie, kAll),
            (Names{"self", "p2p", "shm", "shm"}));
  EXPECT_EQ(plan(3, one_machine(4, kCuda), &pcie, kAll),
            (Names{"shm", "shm", "p2p", "self"}));
}

// FERRY_P2P_DISABLE and FERRY_SHM_DISABLE, without FERRY_TRANSPORTS.
AllowedTransports disabled(bool p2p, bool shm) { return allowed_transports("", p2p, shm, nullptr); }

TEST(TopoPlan, DisableParametersOverrideTheSearch) {
  const SystemGraph sys = load("two_sockets_sys.xml"), nv18 = load("h200_nv18.xml");
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &nv18, disabled(true, false)),
            (Names{"self", "shm"}));
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &nv18, disabled(true, true)),
            (Names{"self", "none"}));
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &sys, disabled(false, true)),
            (Names{"self", "none"}));
}

bool operator==(const AllowedTransports& a, const AllowedTransports& b) {
  return a.p2p == b.p2p && a.shm == b.shm && a.net == b.net;
}

// FERRY_TRANSPORTS's list, alone and with the disable parameters.
TEST(TopoPlan, TransportsListNamesWhatTheEngineMayUse) {
  const struct {
    const char* list;
    bool p2p, shm, net;
  } cases[] = {
      {"", true, true, true},          {"p2p,shm", true, true, false}, {"p2p", true, false, false},
      {"shm", false, true, false},     {" SHM , P2p ", true, true, false}, {"shm,,", false, true, false},
      {"none", false, false, false},   {"net", false, false, true},    {"none,p2p", true, false, false},
      {"net,shm", false, true, true},  {" NET ", false, false, true},
  };
  for (const auto& c : cases) {
    std::vector<std::string> unknown;
    const AllowedTransports allowed = allowed_transports(c.list, false, false, &unknown);
    EXPECT_EQ(allowed.p2p, c.p2p) << "'" << c.list << "'";
    EXPECT_EQ(allowed.shm, c.shm) << "'" << c.list << "'";
    EXPECT_EQ(allowed.net, c.net) << "'" << c.list << "'";
    EXPECT_TRUE(unknown.empty()) << "'" << c.list << "'";
  }
  // The disable parameters take away from the list; neither adds to it.
  EXPECT_TRUE(allowed_transports("p2p,shm", true, false, nullptr) == (AllowedTransports{false, true, false}));
  EXPECT_TRUE(allowed_transports("shm", false, true, nullptr) == (AllowedTransports{false, false, false}));
  EXPECT_TRUE(allowed_transports("p2p", true, false, nullptr) == (AllowedTransports{false, false, false}));
  EXPECT_TRUE(allowed_transports("", false, true, nullptr) == (AllowedTransports{true, false}));
}

// An unknown name is reported and left out; alone, it leaves every
// transport allowed (a typo must not stage everything).
TEST(TopoPlan, UnknownTransportNamesAreReportedAndIgnored) {
  std::vector<std::string> unknown;
  EXPECT_TRUE(allowed_transports("shm, NVLink ,ib", false, false, &unknown) == (AllowedTransports{false, true, false}));
  EXPECT_EQ(unknown, (std::vector<std::string>{"NVLink", "ib"}));
  unknown.clear();
  EXPECT_TRUE(allowed_transports("p2pp", false, false, &unknown) == (AllowedTransports{true, true}));
  EXPECT_EQ(unknown, (std::vector<std::string>{"p2pp"}));
  EXPECT_TRUE(allowed_transports("p2pp", false, false, nullptr) == (AllowedTransports{true, true}));
}

// What FERRY_TRANSPORTS leaves out is planned as the disable parameters
// plan it: p2p becomes shm, shm becomes none.
TEST(TopoPlan, TransportsListRestrictsThePlan) {
  const SystemGraph sys = load("two_sockets_sys.xml"), nv18 = load("h200_nv18.xml");
  const auto only = [](const char* list) { return allowed_transports(list, false, false, nullptr); };
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &nv18, only("shm")), (Names{"self", "shm"}));
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &nv18, only("p2p")), (Names{"self", "p2p"}));
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &sys, only("p2p")), (Names{"self", "none"}));
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &sys, only("shm")), (Names{"self", "shm"}));
  EXPECT_EQ(plan(1, one_machine(3, kEmulated), nullptr, only("shm")),
            (Names{"shm", "self", "shm"}));
  EXPECT_EQ(plan(0, one_machine(3, kEmulated), nullptr, only("none")),
            (Names{"self", "none", "none"}));
  // With a disable parameter: FERRY_TRANSPORTS=shm and FERRY_SHM_DISABLE=1 leave nothing.
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &nv18, allowed_transports("shm", false, true, nullptr)),
            (Names{"self", "none"}));
  // An unknown name changes nothing.
  EXPECT_EQ(plan(0, one_machine(2, kCuda), &sys, only("bogus")), (Names{"self", "shm"}));
}

TEST(TopoPlan, WithoutATopologyOneMachineMeansP2p) {
  EXPECT_EQ(plan(0, one_machine(3, kEmulated), nullptr, kAll),
            (Names{"self", "p2p", "p2p"}));
  EXPECT_EQ(plan(0, one_machine(2, kEmulated), nullptr, disabled(true, false)),
            (Names{"self", "shm"}));
  // No device runtime, another backend: nothing within the machine; the
  // network to another machine.
  EXPECT_EQ(plan(0, one_machine(2, 0), nullptr, kAll), (Names{"self", "none"}));
  std::vector<RankIdentity> ranks = one_machine(3, kEmulated);
  ranks[1].host_hash = 7;
  ranks[2].backend = kCuda;
  EXPECT_EQ(plan(0, ranks, nullptr, kAll), (Names{"self", "net", "none"}));
  // A topology file cannot join ranks of two machines.
  const SystemGraph nv18 = load("h200_nv18.xml");
  ranks = one_machine(2, kCuda);
  ranks[1].host_hash = 7;
  EXPECT_EQ(plan(0, ranks, &nv18, kAll), (Names{"self", "net"}));
}

// Ranks of other machines are reached over the network, and only those.
TEST(TopoPlan, OtherMachinesGoOverTheNetwork) {
  std::vector<RankIdentity> ranks = one_machine(4, kEmulated);
  ranks[2].host_hash = ranks[3].host_hash = 7;  // two machines of two ranks
  const auto only = [](const char* list) { return allowed_transports(list, false, false, nullptr); };
  EXPECT_EQ(plan(0, ranks, nullptr, kAll), (Names{"self", "p2p", "net", "net"}));
  EXPECT_EQ(plan(3, ranks, nullptr, kAll), (Names{"net", "net", "p2p", "self"}));
  EXPECT_EQ(plan(0, ranks, nullptr, only("p2p,shm")), (Names{"self", "p2p", "none", "none"}));
  EXPECT_EQ(plan(0, ranks, nullptr, only("net")), (Names{"self", "none", "net", "net"}));
  EXPECT_EQ(plan(1, ranks, nullptr, disabled(true, false)), (Names{"shm", "self", "net", "net"}));
  // Processes without a device runtime still reach other machines.
  ranks = one_machine(2, 0);
  ranks[1].host_hash = 7;
  EXPECT_EQ(plan(0, ranks, nullptr, kAll), (Names{"self", "net"}));
}

// Discovered GPUs belong to no rank: CUDA ranks get what the worst pair of
// the machine's GPUs allows; the emulated device is not in the graph.
TEST(TopoPlan, DiscoveredGpusGiveTheWorstPairToCudaRanks) {
  const SystemGraph pcie = without_ranks(load("pcie_two_sockets.xml"));
  const SystemGraph nv18 = without_ranks(load("h200_nv18.xml"));
  EXPECT_EQ(plan(1, one_machine(2, kCuda), &pcie, kAll), (Names{"shm", "self"}));
  EXPECT_EQ(plan(1, one_machine(2, kCuda), &nv18, kAll), (Names{"p2p", "self"}));
  EXPECT_EQ(plan(1, one_machine(2, kEmulated), &pcie, kAll),
            (Names{"p2p", "self"}));
  // A file naming fewer ranks than the communicator has is not a rank map.
  const SystemGraph ranked_pcie = load("pcie_two_sockets.xml");
  EXPECT_EQ(plan(0, one_machine(5, kCuda), &ranked_pcie, kAll),
            (Names{"self", "shm", "shm", "shm", "shm"}));
}

TEST(TopoPlan, NoWorkerWhereTwoProcessesTakeTurnsOnOneGpu) {
  std::vector<RankIdentity> ranks = one_machine(3, kCuda);
  for (int r = 0; r < 3; ++r) {
    ranks[r].device_key = 100 + r;
    ranks[r].takes_turns = 1;
  }
  EXPECT_FALSE(ranks_take_turns_on_a_gpu(ranks));  // a GPU each
  ranks[2].device_key = 100;
  EXPECT_TRUE(ranks_take_turns_on_a_gpu(ranks));  // ranks 0 and 2 on one GPU
  ranks[0].takes_turns = ranks[2].takes_turns = 0;
  EXPECT_FALSE(ranks_take_turns_on_a_gpu(ranks));  // MPS: their kernels run at once
  ranks[0].takes_turns = 1;
  ranks[2].pid = ranks[0].pid;
  EXPECT_FALSE(ranks_take_turns_on_a_gpu(ranks));  // one process: one context
  ranks[2].pid = 2000;
  ranks[2].host_hash = 7;
  EXPECT_FALSE(ranks_take_turns_on_a_gpu(ranks));  // the same key on two machines
  ranks[2].host_hash = ranks[0].host_hash;
  EXPECT_TRUE(ranks_take_turns_on_a_gpu(ranks));
  ranks[2].has_device = 0;
  EXPECT_FALSE(ranks_take_turns_on_a_gpu(ranks));
  EXPECT_FALSE(ranks_take_turns_on_a_gpu(one_machine(4, kEmulated)));  // host threads: no time slices
}

TEST(TopoPlan, EveryRankOnOneGpu) {
  std::vector<RankIdentity> ranks = one_machine(3, kCuda);
  for (RankIdentity& r : ranks) r.device_key = 7;
  EXPECT_TRUE(ranks_share_one_gpu(ranks));  // three processes on one GPU (MPS)
  ranks[1].device_key = 8;
  EXPECT_FALSE(ranks_share_one_gpu(ranks));  // rank 1 on another GPU
  ranks[1].device_key = 7;
  ranks[2].has_device = 0;
  EXPECT_FALSE(ranks_share_one_gpu(ranks));  // rank 2 had chosen none
  ranks[2].has_device = 1;
  ranks[2].host_hash = 99;
  EXPECT_FALSE(ranks_share_one_gpu(ranks));  // the same key on another machine
  ranks[2].host_hash = ranks[0].host_hash;
  ranks[2].backend = kEmulated;
  EXPECT_FALSE(ranks_share_one_gpu(ranks));
  EXPECT_TRUE(ranks_share_one_gpu(one_machine(1, kCuda)));
  EXPECT_FALSE(ranks_share_one_gpu(one_machine(2, 0)));  // no device backend
  EXPECT_FALSE(ranks_share_one_gpu({}));
}

TEST(TopoPlan, TheLowestRankOnEachGpuLeadsIt) {
  std::vector<RankIdentity> ranks = one_machine(6, kCuda);
  const std::uint64_t gpu_of_rank[] = {7, 8, 7, 9, 8, 7};
  for (int r = 0; r < 6; ++r) ranks[r].device_key = gpu_of_rank[r];
  EXPECT_EQ(gpu_leaders(ranks), (std::vector<int>{0, 1, 0, 3, 1, 0}));
  ranks[2].has_device = 0;  // no device chosen: no GPU of its own to share
  EXPECT_EQ(gpu_leaders(ranks), (std::vector<int>{0, 1, 2, 3, 1, 0}));
  ranks[2].has_device = 1;
  ranks[5].host_hash = 99;  // the same key on another machine is another GPU
  ranks[4].backend = kEmulated;
  EXPECT_EQ(gpu_leaders(ranks), (std::vector<int>{0, 1, 0, 3, 4, 5}));
  for (int r = 0; r < 6; ++r) ranks[r].device_key = r;
  EXPECT_TRUE(gpu_leaders(ranks).empty());  // a GPU each: nothing to lead
  std::vector<RankIdentity> no_device = one_machine(3, 0);
  EXPECT_TRUE(gpu_leaders(no_device).empty());
}

}  // namespace
}  // namespace ferry
