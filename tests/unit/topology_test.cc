#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "engine/topology/local_topology.h"
#include "engine/topology/search.h"
#include "engine/topology/system_graph.h"
#include "engine/topology/topology_xml.h"

namespace ferry {
namespace {

SystemGraph load_fixtures(const std::vector<std::string>& names) {
  SystemGraph graph;
  for (const std::string& name : names) {
    std::string error;
    EXPECT_EQ(load_topology_file(std::string(FERRY_TOPOLOGY_FIXTURES) + "/" + name, graph, &error), Status::kOk)
        << error;
  }
  return graph;
}

struct Searched {
  SystemGraph graph;
  RankPaths paths;
  std::vector<Ring> rings;
};

Searched search_fixtures(const std::vector<std::string>& names, int nranks, int channels = 2) {
  Searched result{load_fixtures(names), {}, {}};
  std::vector<int> gpu_of_rank;
  EXPECT_EQ(find_rank_gpus(result.graph, nranks, gpu_of_rank), Status::kOk);
  result.paths = compute_rank_paths(result.graph, gpu_of_rank);
  result.rings = search_rings(result.paths, channels);
  return result;
}

TransportKind transport(const Searched& s, int a, int b) { return choose_transport(s.paths.at(a, b)); }

void expect_visits_every_rank_once(const Ring& ring, int nranks) {
  ASSERT_EQ(static_cast<int>(ring.size()), nranks);
  EXPECT_EQ(std::set<int>(ring.begin(), ring.end()).size(), ring.size());
  for (int rank : ring) EXPECT_TRUE(rank >= 0 && rank < nranks) << rank;
}

int hops_of_type(const Searched& s, const Ring& ring, PathType type) {
  int count = 0;
  for (std::size_t i = 0; i < ring.size(); ++i)
    count += s.paths.at(ring[i], ring[(i + 1) % ring.size()]).type == type;
  return count;
}

// Every rank in each tree once, one root, parent and child links agree, and
// no rank is interior in both trees (one rank may be, for odd counts).
void expect_double_binary_tree(const std::vector<int>& order) {
  const int n = static_cast<int>(order.size());
  const auto trees = build_double_binary_tree(order);
  for (const BinaryTree& tree : trees) {
    ASSERT_EQ(static_cast<int>(tree.parent.size()), n);
    int roots = 0, edges = 0;
    for (int rank = 0; rank < n; ++rank) {
      if (tree.parent[rank] < 0) {
        ++roots;
        EXPECT_EQ(rank, tree.root);
      } else {
        const auto& siblings = tree.children[tree.parent[rank]];
        EXPECT_TRUE(siblings[0] == rank || siblings[1] == rank) << "n " << n << " rank " << rank;
      }
      for (int child : tree.children[rank]) {
        if (child < 0) continue;
        ++edges;
        EXPECT_EQ(tree.parent[child], rank) << "n " << n;
      }
    }
    EXPECT_EQ(roots, 1) << "n " << n;
    EXPECT_EQ(edges, n - 1) << "n " << n;  // with one root and agreeing links: a tree over all ranks
  }
  int interior_in_both = 0;
  for (int rank = 0; rank < n; ++rank)
    interior_in_both += trees[0].is_interior(rank) && trees[1].is_interior(rank);
  EXPECT_LE(interior_in_both, n % 2 == 0 ? 0 : 1) << "n " << n;
}

void expect_round_trip(const std::vector<std::string>& names) {
  const SystemGraph loaded = load_fixtures(names);
  SystemGraph reloaded;
  for (int host = 0; host < loaded.host_count; ++host) {
    std::string error;
    ASSERT_EQ(load_topology_xml(dump_topology_xml(loaded, host), reloaded, &error), Status::kOk) << error;
  }
  EXPECT_TRUE(reloaded == loaded) << dump_topology_xml(reloaded, 0);
}

TEST(TopoNvSwitch, EightGpusTalkP2pOverNvLinkAndRingInRankOrder) {
  const Searched s = search_fixtures({"dgx_h100_nvswitch.xml"}, 8);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) {
        EXPECT_EQ(s.paths.at(a, b).type, PathType::kNvLink);
        EXPECT_EQ(transport(s, a, b), TransportKind::kP2p);
      }
  EXPECT_DOUBLE_EQ(s.paths.at(0, 7).bandwidth_gbps, 18 * 20.6);  // all 18 links, over 4 switch chips
  ASSERT_EQ(s.rings.size(), 2u);
  for (const Ring& ring : s.rings) EXPECT_EQ(ring, (Ring{0, 1, 2, 3, 4, 5, 6, 7}));
  expect_double_binary_tree(s.rings[0]);
}

TEST(TopoNvSwitch, RoundTripsThroughXml) { expect_round_trip({"dgx_h100_nvswitch.xml"}); }

TEST(TopoNv18, PairUsesAllEighteenLinksAcrossSockets) {
  const Searched s = search_fixtures({"h200_nv18.xml"}, 2);
  EXPECT_EQ(s.paths.at(0, 1).type, PathType::kNvLink);
  EXPECT_EQ(transport(s, 0, 1), TransportKind::kP2p);
  EXPECT_DOUBLE_EQ(s.paths.at(1, 0).bandwidth_gbps, 18 * 20.6);
  EXPECT_EQ(s.rings[0], (Ring{0, 1}));
  EXPECT_DOUBLE_EQ(ring_bandwidth(s.paths, s.rings[0]), 18 * 20.6);
  expect_double_binary_tree(s.rings[0]);
}

TEST(TopoNv18, RoundTripsThroughXml) { expect_round_trip({"h200_nv18.xml"}); }

TEST(TopoPcie, P2pBelowTheCpuShmAcrossSockets) {
  const Searched s = search_fixtures({"pcie_two_sockets.xml"}, 4);
  EXPECT_EQ(s.paths.at(0, 1).type, PathType::kPxb);  // two sub-switches under one switch
  EXPECT_EQ(s.paths.at(2, 3).type, PathType::kPix);
  EXPECT_EQ(s.paths.at(0, 2).type, PathType::kSys);
  EXPECT_EQ(transport(s, 0, 1), TransportKind::kP2p);
  EXPECT_EQ(transport(s, 2, 3), TransportKind::kP2p);
  EXPECT_EQ(transport(s, 0, 2), TransportKind::kShm);
  EXPECT_EQ(transport(s, 1, 3), TransportKind::kShm);
  EXPECT_DOUBLE_EQ(s.paths.at(2, 3).bandwidth_gbps, 24.0);  // gen4 x16
  EXPECT_DOUBLE_EQ(s.paths.at(1, 2).bandwidth_gbps, 10.0);  // UPI
}

TEST(TopoPcie, RingCrossesTheSocketLinkOnlyTwice) {
  const Searched s = search_fixtures({"pcie_two_sockets.xml"}, 4);
  for (const Ring& ring : s.rings) {
    expect_visits_every_rank_once(ring, 4);
    EXPECT_EQ(hops_of_type(s, ring, PathType::kSys), 2);
  }
  expect_double_binary_tree(s.rings[0]);
}

TEST(TopoPcie, RoundTripsThroughXml) { expect_round_trip({"pcie_two_sockets.xml"}); }

TEST(TopoXgmi, FullMeshIsP2pAndChannelsTakeDifferentLinks) {
  const Searched s = search_fixtures({"mi300x_xgmi_mesh.xml"}, 8, 2);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) {
        EXPECT_TRUE(s.paths.at(a, b).direct);
        EXPECT_EQ(transport(s, a, b), TransportKind::kP2p);
      }
  EXPECT_EQ(s.rings[0], (Ring{0, 1, 2, 3, 4, 5, 6, 7}));
  std::set<std::pair<int, int>> first_hops;
  for (int i = 0; i < 8; ++i) first_hops.insert({s.rings[0][i], s.rings[0][(i + 1) % 8]});
  for (const Ring& ring : s.rings) {
    expect_visits_every_rank_once(ring, 8);
    EXPECT_EQ(hops_of_type(s, ring, PathType::kNvLink), 8);
  }
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(first_hops.count({s.rings[1][i], s.rings[1][(i + 1) % 8]}), 0u) << "hop " << i;
  expect_double_binary_tree(s.rings[1]);
}

TEST(TopoXgmi, RoundTripsThroughXml) { expect_round_trip({"mi300x_xgmi_mesh.xml"}); }

TEST(TopoTwoNodes, NetBetweenHostsShmThroughTheCpu) {
  const Searched s = search_fixtures({"two_nodes_a.xml", "two_nodes_b.xml"}, 4);
  EXPECT_EQ(s.graph.host_count, 2);
  EXPECT_EQ(s.paths.at(0, 1).type, PathType::kPhb);
  EXPECT_EQ(transport(s, 0, 1), TransportKind::kShm);
  EXPECT_EQ(transport(s, 2, 3), TransportKind::kShm);
  EXPECT_EQ(transport(s, 0, 2), TransportKind::kNet);
  EXPECT_EQ(transport(s, 1, 3), TransportKind::kNet);
  EXPECT_DOUBLE_EQ(s.paths.at(1, 2).bandwidth_gbps, 24.0);  // the 200 Gb/s NIC, capped by its gen4 x16 slot
  for (const Ring& ring : s.rings) {
    expect_visits_every_rank_once(ring, 4);
    EXPECT_EQ(hops_of_type(s, ring, PathType::kNet), 2);
  }
  expect_double_binary_tree(s.rings[0]);
}

TEST(TopoTwoNodes, RoundTripsThroughXml) { expect_round_trip({"two_nodes_a.xml", "two_nodes_b.xml"}); }

// Each GPU of a DGX H100 has a NIC behind its own PCIe switch: that one is
// nearest it, every other further away.
TEST(TopoNetPorts, EachGpuIsNearestTheNicBesideIt) {
  const SystemGraph graph = load_fixtures({"dgx_h100_nvswitch.xml"});
  for (int rank = 0; rank < 8; ++rank) {
    const int gpu = graph.gpu_of_rank(rank);
    ASSERT_GE(gpu, 0);
    const std::vector<NetPortReach> ports = net_ports_from(graph, gpu);
    ASSERT_EQ(ports.size(), 8u);
    const std::string beside = "mlx5_" + std::to_string(rank);
    EXPECT_EQ(ports[0].name, beside);
    EXPECT_EQ(ports[0].type, PathType::kPix);
    EXPECT_GT(ports[0].bandwidth_gbps, 0);
    for (std::size_t i = 1; i < ports.size(); ++i) EXPECT_GT(ports[i].type, PathType::kPix) << ports[i].name;
    EXPECT_EQ(nearest_net_ports(graph, gpu), std::vector<std::string>{beside + ":1"});
  }
}

// A NIC under the CPU is as near every GPU there; another host's ports are
// not this GPU's.
TEST(TopoNetPorts, ANicUnderTheCpuServesItsHostAlike) {
  const SystemGraph graph = load_fixtures({"two_nodes_a.xml", "two_nodes_b.xml"});
  for (int rank = 0; rank < 4; ++rank) {
    const int gpu = graph.gpu_of_rank(rank);
    ASSERT_GE(gpu, 0);
    const std::vector<NetPortReach> ports = net_ports_from(graph, gpu);
    ASSERT_EQ(ports.size(), 1u) << "rank " << rank;
    EXPECT_EQ(ports[0].type, PathType::kPhb);
    EXPECT_EQ(nearest_net_ports(graph, gpu), std::vector<std::string>{"mlx5_0:1"});
  }
  // A host without NICs has no nearest port.
  const SystemGraph without = load_fixtures({"pcie_two_sockets.xml"});
  ASSERT_GE(without.gpu_of_rank(0), 0);
  EXPECT_TRUE(net_ports_from(without, without.gpu_of_rank(0)).empty());
  EXPECT_TRUE(nearest_net_ports(without, without.gpu_of_rank(0)).empty());
}

// With FERRY_TOPO_FILE naming a DGX H100, this process (the emulated
// device's GPU 0) takes the NIC beside GPU 0; without a topology, none. In a
// process of its own: parameters are read once.
TEST(TopoNetPorts, ThisProcessIsNearestItsGpusNic) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string file = std::string(FERRY_TOPOLOGY_FIXTURES) + "/dgx_h100_nvswitch.xml";
  setenv("FERRY_TOPO_FILE", file.c_str(), 1);
  setenv("FERRY_DEVICE", "emulated", 1);
  auto nearest = [] {
    std::string names;
    for (const std::string& name : nearest_net_ports_here()) names += name + " ";
    std::fprintf(stderr, "nearest: %s\n", names.c_str());
    _exit(0);
  };
  EXPECT_EXIT(nearest(), ::testing::ExitedWithCode(0), "nearest: mlx5_0:1 \n");
  unsetenv("FERRY_TOPO_FILE");
  EXPECT_EXIT(nearest(), ::testing::ExitedWithCode(0), "nearest: \n");
  unsetenv("FERRY_DEVICE");
}

TEST(TopoTree, DoubleBinaryTreeForEveryRankCount) {
  for (int n = 1; n <= 33; ++n) {
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = n - 1 - i;  // any permutation of the ranks
    expect_double_binary_tree(order);
  }
}

TEST(TopoXml, UnknownAttributesAndElementsAreIgnored) {
  SystemGraph graph;
  std::string error;
  ASSERT_EQ(load_topology_xml("<system version='1' maxbw='3'><cpu numaid='0' future='x'><pci busid='0000:01:00.0'>"
                              "<gpu dev='0' rank='0' mig='1'/></pci><extra/></cpu></system>",
                              graph, &error),
            Status::kOk)
      << error;
  EXPECT_EQ(graph.gpu_of_rank(0), 1);
}

TEST(TopoXml, MalformedXmlNamesTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"<system>\n<cpu numaid=\"0\">\n</system>\n", "line 3: </system> closes <cpu> opened on line 2"},
      {"<system>\n<cpu numaid=\"0\"\n", "line 3:"},
      {"<system>\n\n<cpu numaid=0/>\n</system>", "line 3: expected a quoted attribute value"},
      {"<system>\n<cpu numaid=\"zero\"/>\n</system>", "line 2: numaid=\"zero\" is not an integer"},
      {"<system>\n<cpu numaid=\"0\"><pci busid=\"0000:01:00.0\"><gpu rank=\"0\">\n"
       "<nvlink target=\"0000:99:00.0\" count=\"2\"/></gpu></pci></cpu></system>",
       "line 3: <nvlink> target 0000:99:00.0 is not a GPU"},
      {"<topology/>", "line 1: the root element is <topology>"},
      {"<system/><system/>", "line 1: unexpected content after the root element"},
      {"<system>text</system>", "line 1: unexpected text inside <system>"},
      // An NVLink to it would read back as one to an NVSwitch.
      {"<system>\n<cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0X068000\"><gpu rank=\"0\"/></pci>"
       "</cpu></system>",
       "line 2: a <gpu>'s <pci> has the NVSwitch class 0X068000"},
  };
  for (const auto& [text, expected] : cases) {
    SystemGraph graph;
    std::string error;
    EXPECT_EQ(load_topology_xml(text, graph, &error), Status::kInvalidArgument) << text;
    EXPECT_EQ(error.rfind(expected, 0), 0u) << "got: " << error;
    EXPECT_TRUE(graph == SystemGraph{});
  }
}

TEST(TopoXml, MissingFileIsUnavailable) {
  SystemGraph graph;
  std::string error;
  EXPECT_EQ(load_topology_file("/nonexistent/topo.xml", graph, &error), Status::kUnavailable);
  EXPECT_NE(error.find("/nonexistent/topo.xml"), std::string::npos);
}

}  // namespace
}  // namespace ferry
