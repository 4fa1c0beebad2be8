// Discovery of this machine (real hwloc, real sysfs), the topology the
// engine uses (FERRY_TOPO_FILE / FERRY_TOPO_DUMP_FILE), and the transport
// an engine communicator takes with it (the planning itself:
// transport_table_test.cc).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "engine/collectives/collectives.h"
#include "engine/collectives/communicator.h"
#include "engine/common/params.h"
#include "engine/topology/discovery.h"
#include "engine/topology/local_topology.h"
#include "engine/topology/search.h"
#include "engine/topology/topology_xml.h"
#include "tests/unit/thread_bootstrap.h"

namespace ferry {
namespace {

std::string fixture(const std::string& name) { return std::string(FERRY_TOPOLOGY_FIXTURES) + "/" + name; }

std::string read_line(const std::string& path) {
  std::string line;
  std::ifstream file(path);
  std::getline(file, line);
  return line;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(path.c_str())) {
    while (dirent* entry = readdir(dir))
      if (entry->d_name[0] != '.') names.push_back(entry->d_name);
    closedir(dir);
  }
  return names;
}

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}
std::set<int> parse_cpulist(const std::string& list) {
  std::set<int> out;
  std::size_t pos = 0;
  while (pos < list.size()) {
    const std::size_t comma = list.find(',', pos);
    const std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const std::size_t dash = item.find('-');
    const int first = std::atoi(item.c_str());
    const int last = dash == std::string::npos ? first : std::atoi(item.c_str() + dash + 1);
    for (int i = first; !item.empty() && i <= last; ++i) out.insert(i);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// The topology XML's affinity ("0000ffff,00000003": 32-bit words, most significant first).
std::set<int> parse_affinity(const std::string& mask) {
  std::vector<std::string> words;
  std::size_t pos = 0;
  for (std::size_t comma; (comma = mask.find(',', pos)) != std::string::npos; pos = comma + 1)
    words.push_back(mask.substr(pos, comma - pos));
  words.push_back(mask.substr(pos));
  std::set<int> cpus;
  for (std::size_t w = 0; w < words.size(); ++w) {
    const unsigned long bits = std::strtoul(words[words.size() - 1 - w].c_str(), nullptr, 16);
    for (int b = 0; b < 32; ++b)
      if (bits >> b & 1) cpus.insert(static_cast<int>(w) * 32 + b);
  }
  return cpus;
}

// The PCI function a sysfs device path sits under, or "" (virtual devices).
std::string pci_function_of(const std::string& sysfs_path) {
  char resolved[4096];
  if (!realpath(sysfs_path.c_str(), resolved)) return "";
  static const std::regex kBusid("[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]");
  std::string path = resolved, found;
  std::size_t pos = 0;
  while (pos < path.size()) {
    std::size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    const std::string part = path.substr(pos, slash - pos);
    if (std::regex_match(part, kBusid)) found = part;
    pos = slash + 1;
  }
  return found;
}

std::set<int> numa_nodes_of(const SystemGraph& graph) {
  std::set<int> out;
  for (const Node& node : graph.nodes)
    if (node.type == NodeType::kCpu) out.insert(node.numa_id);
  return out;
}

std::set<std::string> busids_of(const SystemGraph& graph, NodeType type) {
  std::set<std::string> out;
  for (const Node& node : graph.nodes)
    if (node.type == type) out.insert(node.busid);
  return out;
}

#ifdef FERRY_HAVE_HWLOC

struct Discovered {
  Status status;
  SystemGraph graph;
  DiscoveryReport report;
};

const Discovered& discovered() {
  static const Discovered* once = [] {
    auto* d = new Discovered;
    d->status = discover_topology(0, d->graph, &d->report);
    return d;
  }();
  return *once;
}

TEST(TopoDiscovery, LoadsThisMachine) {
  const Discovered& d = discovered();
  ASSERT_EQ(d.status, Status::kOk) << d.report.hwloc_note;
  EXPECT_TRUE(d.report.hwloc);
  EXPECT_EQ(d.graph.host_count, 1);
  EXPECT_EQ(d.report.numa_nodes, static_cast<int>(numa_nodes_of(d.graph).size()));
  EXPECT_FALSE(d.report.nvml_note.empty());  // NVML's absence is stated, not silent
  EXPECT_FALSE(d.report.rocm_smi_note.empty());  // so is ROCm SMI's
  if (d.report.amd_gpus == 0) {
    EXPECT_EQ(d.report.rocm_smi_note, "not asked (no AMD GPU on the PCI bus)");
    EXPECT_FALSE(d.report.rocm_smi);
    EXPECT_EQ(d.report.xgmi_links, 0);
  }
  for (const Link& link : d.graph.links)
    if (link.type == LinkType::kXgmi) EXPECT_TRUE(d.report.rocm_smi) << "xGMI links without ROCm SMI";
}

// One CPU per NUMA node with CPUs, as sysfs lists them; each CPU's
// affinity lies inside its node's cpulist.
TEST(TopoDiscovery, NumaNodesAreSysfsNodesWithCpus) {
  const Discovered& d = discovered();
  ASSERT_EQ(d.status, Status::kOk);
  const std::string has_cpu = read_line("/sys/devices/system/node/has_cpu");
  const std::set<int> found = numa_nodes_of(d.graph);
  if (has_cpu.empty()) {  // a kernel without NUMA: one node
    EXPECT_EQ(found.size(), 1u);
    return;
  }
  // hwloc leaves out nodes none of whose CPUs this process may use.
  std::set<int> allowed_cpus;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Cpus_allowed_list:", 0) == 0) allowed_cpus = parse_cpulist(line.substr(line.find(':') + 1));
  std::set<int> expected;
  for (int node : parse_cpulist(has_cpu)) {
    const std::set<int> cpus = parse_cpulist(read_line("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist"));
    for (int cpu : cpus)
      if (allowed_cpus.empty() || allowed_cpus.count(cpu)) expected.insert(node);
  }
  EXPECT_EQ(found, expected);
  for (const Node& node : d.graph.nodes) {
    if (node.type != NodeType::kCpu) continue;
    const std::set<int> cpus = parse_affinity(node.affinity);
    EXPECT_FALSE(cpus.empty()) << "numa " << node.numa_id;
    const std::set<int> sysfs =
        parse_cpulist(read_line("/sys/devices/system/node/node" + std::to_string(node.numa_id) + "/cpulist"));
    for (int cpu : cpus) EXPECT_TRUE(sysfs.count(cpu)) << "cpu " << cpu << " is not on node " << node.numa_id;
  }
}

// GPUs: NVIDIA display/3D controllers, AMD display controllers and
// processing accelerators on the PCI bus.
TEST(TopoDiscovery, GpusAreTheNvidiaAndAmdDisplayControllersOnThePciBus) {
  const Discovered& d = discovered();
  ASSERT_EQ(d.status, Status::kOk);
  std::set<std::string> expected;
  int amd = 0;
  for (const std::string& busid : list_dir("/sys/bus/pci/devices")) {
    const std::string dir = "/sys/bus/pci/devices/" + busid + "/";
    const std::string pci_class = read_line(dir + "class").substr(0, 6), vendor = read_line(dir + "vendor");
    const bool display = pci_class == "0x0300" || pci_class == "0x0302";
    const bool amd_gpu = vendor == "0x1002" && (display || pci_class == "0x0380" || pci_class == "0x1200");
    if ((vendor == "0x10de" && display) || amd_gpu) expected.insert(busid);
    amd += amd_gpu;
  }
  EXPECT_EQ(busids_of(d.graph, NodeType::kGpu), expected);
  EXPECT_EQ(d.report.gpus, static_cast<int>(expected.size()));
  EXPECT_EQ(d.report.amd_gpus, amd);
  for (const Node& node : d.graph.nodes)
    if (node.type == NodeType::kGpu) EXPECT_EQ(node.rank, -1) << "discovered GPUs belong to no rank yet";
}

// NICs: the PCI functions behind the network interfaces and verbs devices
// that sysfs lists; their ports are the verbs devices, else the interfaces.
TEST(TopoDiscovery, NicsAreThePciFunctionsOfNetworkDevices) {
  const Discovered& d = discovered();
  ASSERT_EQ(d.status, Status::kOk);
  std::map<std::string, std::set<std::string>> verbs, interfaces;  // by PCI function
  for (const std::string& name : list_dir("/sys/class/infiniband"))
    if (const std::string pci = pci_function_of("/sys/class/infiniband/" + name + "/device"); !pci.empty())
      verbs[pci].insert(name);
  for (const std::string& name : list_dir("/sys/class/net"))
    if (const std::string pci = pci_function_of("/sys/class/net/" + name); !pci.empty()) interfaces[pci].insert(name);
  std::set<std::string> expected_nics, expected_ports;
  for (const auto& [pci, names] : interfaces) {
    expected_nics.insert(pci);
    if (!verbs.count(pci)) expected_ports.insert(names.begin(), names.end());
  }
  for (const auto& [pci, names] : verbs) {
    expected_nics.insert(pci);
    expected_ports.insert(names.begin(), names.end());
  }
  EXPECT_EQ(busids_of(d.graph, NodeType::kNic), expected_nics);
  std::set<std::string> ports;
  for (const Node& node : d.graph.nodes)
    if (node.type == NodeType::kNet) {
      ports.insert(node.name);
      EXPECT_GT(node.speed_mbps, 0) << node.name;
      EXPECT_EQ(d.graph.nodes[node.parent].type, NodeType::kNic) << node.name;
    }
  EXPECT_EQ(ports, expected_ports);
}

TEST(TopoDiscovery, DumpAndLoadGiveTheSameGraph) {
  const Discovered& d = discovered();
  ASSERT_EQ(d.status, Status::kOk);
  const std::string xml = dump_topology_xml(d.graph, 0);
  SystemGraph loaded;
  std::string error;
  ASSERT_EQ(load_topology_xml(xml, loaded, &error), Status::kOk) << error << "\n" << xml;
  EXPECT_TRUE(loaded == d.graph) << xml;
  EXPECT_EQ(dump_topology_xml(loaded, 0), xml);
}

// What the engine reads: FERRY_TOPO_DUMP_FILE gets the graph, %p expanded.
TEST(TopoLocal, DumpFileHoldsTheDiscoveredGraph) {
  const std::string pattern = ::testing::TempDir() + "ferry-topo-%p.xml";
  const LocalTopology topo = load_local_topology("", pattern, 0);
  ASSERT_TRUE(topo.available) << topo.error;
  EXPECT_EQ(topo.dump_path, ::testing::TempDir() + "ferry-topo-" + std::to_string(getpid()) + ".xml");
  SystemGraph loaded;
  std::string error;
  ASSERT_EQ(load_topology_file(topo.dump_path, loaded, &error), Status::kOk) << error;
  EXPECT_TRUE(loaded == topo.graph);
  EXPECT_TRUE(topo.graph == discovered().graph);
  std::remove(topo.dump_path.c_str());
}

// On the emulated device its GPU joins this machine's graph, on the first
// CPU; the ranks of the machine share it, so the search gives them LOC and
// P2P, as the engine plans for them. A file is the machine as written.
TEST(TopoDiscovery, EmulatedDeviceIsAGpuOfTheGraph) {
  SystemGraph graph;
  DiscoveryReport report;
  ASSERT_EQ(discover_topology(1, graph, &report), Status::kOk) << report.hwloc_note;
  EXPECT_EQ(report.emulated_gpus, 1);
  EXPECT_EQ(report.gpus, discovered().report.gpus);  // those on the PCI bus only
  EXPECT_EQ(graph.nodes.size(), discovered().graph.nodes.size() + 1);
  std::vector<int> emulated;
  for (int id = 0; id < static_cast<int>(graph.nodes.size()); ++id)
    if (is_emulated_gpu(graph.nodes[id])) emulated.push_back(id);
  ASSERT_EQ(emulated.size(), 1u);
  const Node& gpu = graph.nodes[emulated[0]];
  EXPECT_EQ(gpu.busid, "emulated:0");
  EXPECT_EQ(gpu.dev, 0);
  EXPECT_EQ(gpu.rank, -1);
  EXPECT_EQ(graph.nodes[gpu.parent].type, NodeType::kCpu);
  EXPECT_EQ(graph.nodes[gpu.parent].numa_id, graph.nodes[0].numa_id);
  for (const Node& node : discovered().graph.nodes) EXPECT_FALSE(is_emulated_gpu(node));

  const RankPaths paths = compute_rank_paths(graph, {emulated[0], emulated[0]});
  EXPECT_EQ(paths.at(0, 1).type, PathType::kLocal);
  EXPECT_EQ(choose_transport(paths.at(0, 1)), TransportKind::kP2p);

  const std::string xml = dump_topology_xml(graph, 0);
  SystemGraph loaded;
  std::string error;
  ASSERT_EQ(load_topology_xml(xml, loaded, &error), Status::kOk) << error << "\n" << xml;
  EXPECT_TRUE(loaded == graph) << xml;

  const LocalTopology local = load_local_topology("", "", 1);
  ASSERT_TRUE(local.available) << local.error;
  EXPECT_TRUE(local.graph == graph);
  const LocalTopology file = load_local_topology(fixture("h200_nv18.xml"), "", 1);
  for (const Node& node : file.graph.nodes) EXPECT_FALSE(is_emulated_gpu(node));
}

#else

TEST(TopoDiscovery, WithoutHwlocSaysSo) {
  SystemGraph graph;
  DiscoveryReport report;
  EXPECT_EQ(discover_topology(0, graph, &report), Status::kUnavailable);
  EXPECT_NE(report.hwloc_note.find("without hwloc"), std::string::npos) << report.hwloc_note;
  EXPECT_TRUE(graph.nodes.empty());
}

#endif

TEST(TopoLocal, FileIsLoadedInsteadOfDiscovering) {
  const LocalTopology topo = load_local_topology(fixture("h200_nv18.xml"), "", 0);
  ASSERT_TRUE(topo.available) << topo.error;
  EXPECT_EQ(topo.source, "FERRY_TOPO_FILE=" + fixture("h200_nv18.xml"));
  EXPECT_FALSE(topo.discovery.hwloc);  // discovery did not run
  EXPECT_EQ(topo.graph.gpu_of_rank(1) >= 0, true);
}

TEST(TopoLocal, BadFileNamesTheFileAndTheLine) {
  const LocalTopology topo = load_local_topology(fixture("malformed_line4.xml"), "", 0);
  EXPECT_FALSE(topo.available);
  EXPECT_NE(topo.error.find(fixture("malformed_line4.xml")), std::string::npos) << topo.error;
  EXPECT_NE(topo.error.find("line 4"), std::string::npos) << topo.error;
  EXPECT_TRUE(topo.graph.nodes.empty());

  const LocalTopology missing = load_local_topology("/nonexistent/topo.xml", "", 0);
  EXPECT_FALSE(missing.available);
  EXPECT_NE(missing.error.find("/nonexistent/topo.xml"), std::string::npos) << missing.error;
}

// The engine communicator end to end, with the topology of this process
// (FERRY_TOPO_FILE etc. set by CTest; see tests/unit/CMakeLists.txt).
// TOPO_TEST_EXPECT names the transport the settings must give: p2p (the
// default: no file, this machine), shm or none; TOPO_TEST_WARNING, a
// warning the settings must log once.
TEST(TopoCommunicator, TransportFollowsTheTopologyOfThisProcess) {
  const char* expect = std::getenv("TOPO_TEST_EXPECT");
  const std::string expected = expect ? expect : "p2p";
  constexpr int kRanks = 2;
  constexpr std::size_t kCount = 4096;
  testing::run_ranks(kRanks, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
    std::unique_ptr<Communicator> comm;
    ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
    EXPECT_EQ(comm->transports().name_to(1 - rank), expected);
    EXPECT_EQ(comm->transports().name_to(rank), std::string("self"));
    EXPECT_EQ(comm->all_peers_mapped(), expected == "p2p");
    EXPECT_EQ(comm->shm() != nullptr, expected == "shm");

    // The chosen transport carries an allreduce (none: the caller stages).
    gpu::Backend* device = gpu::emulated_backend();
    std::vector<float> mine(kCount, static_cast<float>(rank + 1)), got(kCount, 0.0f);
    void* buffer = nullptr;
    ASSERT_EQ(device->device_alloc(kCount * sizeof(float), &buffer), Status::kOk);
    ASSERT_EQ(gpu::copy(buffer, mine.data(), kCount * sizeof(float)), Status::kOk);
    bool ran = false;
    ASSERT_EQ(allreduce(*comm, nullptr, buffer, kCount, DataType::kFloat32, ReduceOp::kSum, true, &ran), Status::kOk);
    EXPECT_EQ(ran, expected != "none");
    if (ran) {
      ASSERT_EQ(gpu::copy(got.data(), buffer, kCount * sizeof(float)), Status::kOk);
      EXPECT_EQ(got, std::vector<float>(kCount, 3.0f));
    }
    EXPECT_TRUE(ferry::ok(device->device_free(buffer)));
  });

  const LocalTopology& topo = local_topology();
  if (!params().topo_file.empty() && !topo.available) {
    // A bad file: the engine fell back, and the error names file and line.
    EXPECT_NE(topo.error.find(params().topo_file), std::string::npos) << topo.error;
    EXPECT_NE(topo.error.find("line "), std::string::npos) << topo.error;
  }
  if (const char* warning = std::getenv("TOPO_TEST_WARNING")) {
    // Once in this process's log, however many communicators it made.
    std::string path = params().debug_file;
    ASSERT_NE(path.find("%p"), std::string::npos) << "FERRY_DEBUG_FILE=" << path;
    path.replace(path.find("%p"), 2, std::to_string(getpid()));
    std::ifstream file(path);
    const std::string log((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    const std::size_t first = log.find(warning);
    EXPECT_NE(first, std::string::npos) << log;
    if (first != std::string::npos) EXPECT_EQ(log.find(warning, first + 1), std::string::npos) << log;
    EXPECT_NE(log.find(" WARN TRANSPORT "), std::string::npos) << log;
    std::remove(path.c_str());
  }
  if (!params().topo_dump_file.empty()) {
    ASSERT_TRUE(topo.available) << topo.error;
    SystemGraph loaded;
    std::string error;
    ASSERT_EQ(load_topology_file(topo.dump_path, loaded, &error), Status::kOk) << error;
    EXPECT_TRUE(loaded == topo.graph);
  }
}

}  // namespace
}  // namespace ferry
