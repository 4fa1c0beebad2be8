// ROCm SMI: the library opened with dlopen (the real one where it is
// installed, none where it is not), and what discovery makes of its
// answers: <xgmi> elements that load into the system graph as xGMI edges.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/topology/discovery.h"
#include "engine/topology/rocm_smi.h"
#include "engine/topology/search.h"
#include "engine/topology/topology_xml.h"

namespace ferry {
namespace {

std::string read_line(const std::string& path) {
  std::string line;
  std::ifstream file(path);
  std::getline(file, line);
  return line;
}

// AMD GPUs on the PCI bus, as sysfs lists them (the classes discovery takes).
int amd_gpus_in_sysfs() {
  int count = 0;
  if (DIR* dir = opendir("/sys/bus/pci/devices")) {
    while (dirent* entry = readdir(dir)) {
      const std::string base = std::string("/sys/bus/pci/devices/") + entry->d_name + "/";
      const std::string pci_class = read_line(base + "class").substr(0, 6);
      count += read_line(base + "vendor") == "0x1002" &&
               (pci_class == "0x0300" || pci_class == "0x0302" || pci_class == "0x0380" || pci_class == "0x1200");
    }
    closedir(dir);
  }
  return count;
}

// Whether the dynamic linker finds the library under one of the names
// Ferry looks for (librocm-smi64-1 installed, or ROCm).
bool library_installed() {
  for (const std::string& name : rocm_smi_library_names())
    if (void* handle = dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(handle);
      return true;
    }
  return false;
}

// rsmi_init writes its own complaint to stderr where it fails; the tests
// keep it out of their output.
RocmSmiScan quiet_scan(const std::vector<std::string>& names = rocm_smi_library_names()) {
  ::testing::internal::CaptureStderr();
  RocmSmiScan scan = scan_rocm_smi(names);
  ::testing::internal::GetCapturedStderr();
  return scan;
}

TEST(RocmSmiLibrary, MissingLibrarySaysWhatWasTried) {
  const RocmSmiScan scan = scan_rocm_smi({"/nonexistent/librocm_smi64.so.1", "librocm_smi64_absent.so"});
  EXPECT_FALSE(scan.loaded);
  EXPECT_TRUE(scan.library.empty());
  EXPECT_TRUE(scan.gpus.empty());
  EXPECT_NE(scan.note.find("librocm_smi64 not found"), std::string::npos) << scan.note;
  EXPECT_NE(scan.note.find("/nonexistent/librocm_smi64.so.1, librocm_smi64_absent.so"), std::string::npos)
      << scan.note;
}

// With the library installed (tools/setup.sh installs librocm-smi64-1), the
// loader opens it and every function Ferry needs resolves; rsmi_init then
// answers for this machine: an error or no GPU without AMD GPUs, the GPUs
// on the PCI bus with them. Twice, as the library is closed in between.
// Without the library, the answer says it is not found.
TEST(RocmSmiLibrary, RealLibraryAnswersForThisMachine) {
  const bool installed = library_installed();
  for (int pass = 0; pass < 2; ++pass) {
    const RocmSmiScan scan = quiet_scan();
    if (!installed) {
      EXPECT_FALSE(scan.loaded);
      EXPECT_NE(scan.note.find("librocm_smi64 not found"), std::string::npos) << scan.note;
      continue;
    }
    ASSERT_FALSE(scan.library.empty()) << scan.note;
    EXPECT_EQ(scan.note.find("not found"), std::string::npos) << scan.note;
    EXPECT_EQ(scan.note.find("lacks functions"), std::string::npos) << scan.note;
    if (amd_gpus_in_sysfs() == 0) {
      if (scan.loaded) {
        EXPECT_TRUE(scan.gpus.empty());
        EXPECT_NE(scan.note.find("no GPU reported"), std::string::npos) << scan.note;
      } else {
        EXPECT_NE(scan.note.find("rsmi_init failed: "), std::string::npos) << scan.note;
        EXPECT_NE(scan.note.find("(status "), std::string::npos) << scan.note;
      }
      continue;
    }
    ASSERT_TRUE(scan.loaded) << scan.note;
    EXPECT_FALSE(scan.gpus.empty()) << scan.note;
    for (const RocmSmiGpu& gpu : scan.gpus)
      EXPECT_EQ(read_line("/sys/bus/pci/devices/" + gpu.busid + "/vendor"), "0x1002") << gpu.busid;
  }
  if (!installed) GTEST_SKIP() << "librocm_smi64 is not installed (apt-get install librocm-smi64-1)";
}

TEST(RocmSmiLibrary, LibraryWithoutTheFunctionsSaysSo) {
  const RocmSmiScan scan = scan_rocm_smi({"libm.so.6"});
  EXPECT_FALSE(scan.loaded);
  EXPECT_NE(scan.note.find("lacks functions Ferry needs"), std::string::npos) << scan.note;
}

// Every call of the loader, through a stand-in library (fake_rocm_smi.cc)
// whose answers are known.
TEST(RocmSmiLibrary, AnswersOfALibraryAreRead) {
  const RocmSmiScan scan = scan_rocm_smi({"/nonexistent/librocm_smi64.so", FERRY_FAKE_ROCM_SMI});
  ASSERT_TRUE(scan.loaded) << scan.note;
  EXPECT_EQ(scan.note, std::string("ROCm SMI 9.8.7 (") + FERRY_FAKE_ROCM_SMI + ")");
  ASSERT_EQ(scan.gpus.size(), 4u);
  const std::vector<std::string> busids = {"0000:0c:00.0", "0000:22:00.0", "0000:0c:00.0", "0001:9f:00.0"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(scan.gpus[i].index, i);
    EXPECT_EQ(scan.gpus[i].busid, busids[i]);
  }
  EXPECT_EQ(scan.gpus[0].name, "Fake MI250X");
  EXPECT_EQ(scan.gpus[3].name, "Fake Radeon");
  const RocmSmiLink& xgmi = scan.links[0][1];
  EXPECT_TRUE(xgmi.known);
  EXPECT_EQ(xgmi.type, RocmSmiLinkType::kXgmi);
  EXPECT_EQ(xgmi.hops, 1u);
  EXPECT_EQ(xgmi.weight, 15u);
  EXPECT_EQ(xgmi.min_mbps, 50000u);
  EXPECT_EQ(xgmi.max_mbps, 100000u);
  const RocmSmiLink& pcie = scan.links[3][0];
  EXPECT_TRUE(pcie.known);
  EXPECT_EQ(pcie.type, RocmSmiLinkType::kPcie);
  EXPECT_EQ(pcie.hops, 3u);
  EXPECT_EQ(pcie.weight, 72u);
  EXPECT_EQ(pcie.max_mbps, 0u);  // not asked: ROCm SMI answers for xGMI only
  EXPECT_FALSE(scan.links[2][2].known);

  // GPU 0's second partition adds nothing; its two links to GPU 1 count.
  const std::vector<XgmiLink> from0 = xgmi_links_of(scan, "0000:0c:00.0");
  ASSERT_EQ(from0.size(), 1u);
  EXPECT_EQ(from0[0].target, "0000:22:00.0");
  EXPECT_EQ(from0[0].count, 2);
  EXPECT_TRUE(xgmi_links_of(scan, "0001:9f:00.0").empty());
}

TEST(RocmSmiBusid, BdfidIsTheOsBusIdOfFunctionZero) {
  EXPECT_EQ(rocm_smi_busid(0x0c00), "0000:0c:00.0");
  EXPECT_EQ(rocm_smi_busid(uint64_t{0xdf} << 8 | 0x1f << 3), "0000:df:1f.0");
  // Domain in bits 63..32; a partition in bits 31..28 or in the function bits.
  EXPECT_EQ(rocm_smi_busid(uint64_t{1} << 32 | uint64_t{3} << 28 | 0x9f00 | 2), "0001:9f:00.0");
  EXPECT_EQ(rocm_smi_busid(uint64_t{0x10000} << 32 | 0x0100), "10000:01:00.0");
}

// ---- from ROCm SMI's answers to the graph ---------------------------------

constexpr const char* kAcceleratorClass = "0x120000";

// What ROCm SMI answers on an 8-GPU MI300X platform: every pair one xGMI
// hop apart, one link each (64 GB/s both ways), weight 15.
RocmSmiScan mi300x_mesh(const std::vector<std::string>& busids) {
  RocmSmiScan scan;
  scan.loaded = true;
  for (std::size_t i = 0; i < busids.size(); ++i) scan.gpus.push_back({static_cast<int>(i), busids[i], "MI300X"});
  scan.links.assign(busids.size(), std::vector<RocmSmiLink>(busids.size()));
  for (std::size_t a = 0; a < busids.size(); ++a)
    for (std::size_t b = 0; b < busids.size(); ++b)
      if (a != b) scan.links[a][b] = {true, RocmSmiLinkType::kXgmi, 1, 15, 64000, 64000};
  return scan;
}

// A machine as discovery writes it, GPUs (rank -1) at these bus ids, the
// first half under CPU 0 and the rest under CPU 1, each GPU with the <xgmi>
// elements discovery writes from scan. links: how many were written.
std::string machine_xml(const RocmSmiScan& scan, const std::vector<std::string>& busids, int* links) {
  std::map<std::string, std::string> classes;
  for (const std::string& busid : busids) classes[busid] = kAcceleratorClass;
  std::string xml = "<system version=\"1\">\n";
  for (std::size_t cpu = 0; cpu < 2; ++cpu) {
    xml += "  <cpu numaid=\"" + std::to_string(cpu) + "\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n";
    for (std::size_t i = cpu * busids.size() / 2; i < (cpu + 1) * busids.size() / 2; ++i) {
      xml += "    <pci busid=\"" + busids[i] + "\" class=\"" + kAcceleratorClass +
             "\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n      <gpu dev=\"" + std::to_string(i) +
             "\" sm=\"0\" rank=\"-1\" gdr=\"0\">\n" + xgmi_elements(scan, busids[i], classes, 4, links) +
             "      </gpu>\n    </pci>\n";
    }
    xml += "  </cpu>\n";
  }
  return xml + "</system>\n";
}

SystemGraph load_xml(const std::string& xml) {
  SystemGraph graph;
  std::string error;
  EXPECT_EQ(load_topology_xml(xml, graph, &error), Status::kOk) << error << "\n" << xml;
  return graph;
}

// The graph's GPU-to-GPU links, by bus id: (from, to, type, count, GB/s).
using LinkKey = std::tuple<std::string, std::string, LinkType, int, double>;
std::set<LinkKey> gpu_links(const SystemGraph& graph) {
  std::set<LinkKey> out;
  for (const Link& link : graph.links) {
    const Node& from = graph.nodes[link.from];
    const Node& to = graph.nodes[link.to];
    if (from.type == NodeType::kGpu && to.type == NodeType::kGpu)
      out.insert({from.busid, to.busid, link.type, link.count, link.bandwidth_gbps});
  }
  return out;
}

std::vector<int> gpu_nodes(const SystemGraph& graph, const std::vector<std::string>& busids) {
  std::vector<int> out;
  for (const std::string& busid : busids)
    for (int id = 0; id < static_cast<int>(graph.nodes.size()); ++id)
      if (graph.nodes[id].type == NodeType::kGpu && graph.nodes[id].busid == busid) out.push_back(id);
  EXPECT_EQ(out.size(), busids.size());
  return out;
}

const std::vector<std::string> kMi300xBusids = {"0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0",
                                                "0000:9f:00.0", "0000:af:00.0", "0000:bf:00.0", "0000:df:00.0"};

// Eight GPUs, each pair one xGMI hop apart: the links RCCL's file of that
// machine gives (tests/unit/topology/mi300x_xgmi_mesh.xml), and the search
// puts every pair on its own xGMI link, P2P.
TEST(RocmSmiXgmi, MeshOfEightGivesTheLinksOfRcclsFile) {
  int written = 0;
  const SystemGraph graph = load_xml(machine_xml(mi300x_mesh(kMi300xBusids), kMi300xBusids, &written));
  EXPECT_EQ(written, 8 * 7);
  const std::set<LinkKey> links = gpu_links(graph);
  EXPECT_EQ(links.size(), 8u * 7u);
  for (const LinkKey& link : links) {
    EXPECT_EQ(std::get<2>(link), LinkType::kXgmi);
    EXPECT_EQ(std::get<3>(link), 1);
    EXPECT_DOUBLE_EQ(std::get<4>(link), xgmi_bandwidth_per_link());
  }
  SystemGraph rccl;
  std::string error;
  ASSERT_EQ(load_topology_file(std::string(FERRY_TOPOLOGY_FIXTURES) + "/mi300x_xgmi_mesh.xml", rccl, &error),
            Status::kOk)
      << error;
  EXPECT_EQ(links, gpu_links(rccl));

  const RankPaths paths = compute_rank_paths(graph, gpu_nodes(graph, kMi300xBusids));
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) {
        EXPECT_EQ(paths.at(a, b).type, PathType::kNvLink) << a << "-" << b;  // NVLink and xGMI: one path type
        EXPECT_TRUE(paths.at(a, b).direct) << a << "-" << b;
        EXPECT_DOUBLE_EQ(paths.at(a, b).bandwidth_gbps, xgmi_bandwidth_per_link());
        EXPECT_EQ(choose_transport(paths.at(a, b)), TransportKind::kP2p) << a << "-" << b;
      }
  EXPECT_EQ(worst_transport_between_gpus(graph, 0), TransportKind::kP2p);
}

// Four GPUs, two per socket: 0-1 joined by four xGMI links (ROCm SMI's
// bandwidth range 50-200 GB/s), 2-3 by one with no bandwidth given, 0-2
// xGMI two hops apart (through another GPU: no link of their own), 1-3 over
// PCIe. A second partition of GPU 0 (its bus id again) and a GPU that is not
// in the XML add nothing.
TEST(RocmSmiXgmi, OnlyDirectXgmiPairsBecomeLinks) {
  const std::vector<std::string> busids = {"0000:0c:00.0", "0000:22:00.0", "0000:9f:00.0", "0000:af:00.0"};
  RocmSmiScan scan;
  scan.loaded = true;
  for (int i = 0; i < 4; ++i) scan.gpus.push_back({i, busids[i], ""});
  scan.gpus.push_back({4, busids[0], "partition 1 of GPU 0"});
  scan.gpus.push_back({5, "0000:e1:00.0", "not in the XML"});
  scan.links.assign(6, std::vector<RocmSmiLink>(6));
  const auto both = [&](int a, int b, RocmSmiLink link) { scan.links[a][b] = scan.links[b][a] = link; };
  both(0, 1, {true, RocmSmiLinkType::kXgmi, 1, 15, 50000, 200000});
  both(2, 3, {true, RocmSmiLinkType::kXgmi, 1, 15, 0, 0});
  both(0, 2, {true, RocmSmiLinkType::kXgmi, 2, 30, 0, 0});
  both(1, 3, {true, RocmSmiLinkType::kPcie, 3, 72, 0, 0});
  both(0, 3, {false, RocmSmiLinkType::kUndefined, 0, 0, 0, 0});
  for (int partner : {1, 2, 3, 5}) both(4, partner, {true, RocmSmiLinkType::kXgmi, 1, 15, 64000, 64000});
  both(0, 5, {true, RocmSmiLinkType::kXgmi, 1, 15, 64000, 64000});

  int written = 0;
  const SystemGraph graph = load_xml(machine_xml(scan, busids, &written));
  EXPECT_EQ(written, 4 + 4 + 1 + 1);
  const double four = 4 * xgmi_bandwidth_per_link(), one = xgmi_bandwidth_per_link();
  EXPECT_EQ(gpu_links(graph), (std::set<LinkKey>{{busids[0], busids[1], LinkType::kXgmi, 4, four},
                                                 {busids[1], busids[0], LinkType::kXgmi, 4, four},
                                                 {busids[2], busids[3], LinkType::kXgmi, 1, one},
                                                 {busids[3], busids[2], LinkType::kXgmi, 1, one}}));

  const RankPaths paths = compute_rank_paths(graph, gpu_nodes(graph, busids));
  EXPECT_EQ(paths.at(0, 1).type, PathType::kNvLink);
  EXPECT_DOUBLE_EQ(paths.at(0, 1).bandwidth_gbps, four);
  EXPECT_EQ(choose_transport(paths.at(0, 1)), TransportKind::kP2p);
  EXPECT_EQ(choose_transport(paths.at(3, 2)), TransportKind::kP2p);
  EXPECT_EQ(paths.at(0, 2).type, PathType::kSys);  // across the sockets: no xGMI edge
  EXPECT_EQ(choose_transport(paths.at(0, 2)), TransportKind::kShm);
  EXPECT_EQ(worst_transport_between_gpus(graph, 0), TransportKind::kShm);
}

TEST(RocmSmiXgmi, NoAnswerNoLinks) {
  const RocmSmiScan none;
  EXPECT_TRUE(xgmi_links_of(none, "0000:0c:00.0").empty());
  EXPECT_EQ(xgmi_elements(none, "0000:0c:00.0", {{"0000:0c:00.0", kAcceleratorClass}}, 4), "");
}

TEST(RocmSmiDescribe, OneLinePerGpuAndPair) {
  RocmSmiScan scan = mi300x_mesh({"0000:0c:00.0", "0000:22:00.0", "0000:38:00.0"});
  scan.gpus[0].name = "AMD Instinct MI300X";
  scan.links[1][2] = {true, RocmSmiLinkType::kPcie, 2, 40, 0, 0};
  scan.links[0][2] = {};
  EXPECT_EQ(describe_rocm_smi(scan),
            "  rocm-smi GPU 0: 0000:0c:00.0, AMD Instinct MI300X\n"
            "  rocm-smi GPU 1: 0000:22:00.0, MI300X\n"
            "  rocm-smi GPU 2: 0000:38:00.0, MI300X\n"
            "  rocm-smi 0-1: xGMI, 1 hop(s), weight 15, 64000-64000 MB/s\n"
            "  rocm-smi 0-2: link not known\n"
            "  rocm-smi 1-2: PCIe, 2 hop(s), weight 40\n");
}

}  // namespace
}  // namespace ferry
