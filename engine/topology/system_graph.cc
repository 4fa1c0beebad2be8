#include "engine/topology/system_graph.h"

#include <cstdlib>

namespace ferry {

const char* node_type_name(NodeType type) {
  switch (type) {
    case NodeType::kCpu: return "CPU";
    case NodeType::kPciSwitch: return "PCI";
    case NodeType::kGpu: return "GPU";
    case NodeType::kNvSwitch: return "NVS";
    case NodeType::kNic: return "NIC";
    case NodeType::kNet: return "NET";
  }
  return "?";
}

const char* link_type_name(LinkType type) {
  switch (type) {
    case LinkType::kNvLink: return "NVL";
    case LinkType::kXgmi: return "XGMI";
    case LinkType::kPcie: return "PCI";
    case LinkType::kSys: return "SYS";
    case LinkType::kNet: return "NET";
  }
  return "?";
}

int SystemGraph::add_node(const Node& node) {
  nodes.push_back(node);
  return static_cast<int>(nodes.size()) - 1;
}

void SystemGraph::add_link(const Link& link) { links.push_back(link); }

void SystemGraph::add_link_pair(int a, int b, LinkType type, int count, double bandwidth_gbps) {
  add_link({a, b, type, count, bandwidth_gbps, {}});
  add_link({b, a, type, count, bandwidth_gbps, {}});
}

int SystemGraph::gpu_of_rank(int rank) const {
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i)
    if (nodes[i].type == NodeType::kGpu && nodes[i].rank == rank) return i;
  return -1;
}

double nvlink_bandwidth_per_link(int sm) {
  if (sm >= 100) return 40.1;
  if (sm >= 90) return 20.6;
  if (sm >= 70) return 20.0;
  return 18.0;
}

// MI300X Infinity Fabric: 64 GB/s per direction per link.
double xgmi_bandwidth_per_link() { return 64.0; }

double pcie_bandwidth(const std::string& link_speed, int link_width) {
  // Files written without sysfs access leave these empty: assume gen3 x16.
  const double gigatransfers = link_speed.empty() ? 8.0 : std::strtod(link_speed.c_str(), nullptr);
  const int lanes = link_width > 0 ? link_width : 16;
  // About 3/4 of the raw rate survives encoding and TLP overhead
  // (16 GT/s x16 -> 24 GB/s, as NCCL counts it).
  return gigatransfers * lanes * 3.0 / 32.0;
}

double inter_socket_bandwidth(const std::string& cpu_vendor) {
  if (cpu_vendor == "AuthenticAMD") return 16.0;  // Infinity Fabric between sockets
  if (cpu_vendor == "GenuineIntel") return 10.0;  // UPI (Skylake and later)
  return 6.0;
}

double net_bandwidth(int speed_mbps) { return speed_mbps / 8000.0; }

}  // namespace ferry
