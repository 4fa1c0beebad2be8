// The system graph: CPUs (one per NUMA node), PCI switches, GPUs, NVSwitches,
// NICs and their network ports, joined by links with a bandwidth in GB/s.
// It is built from NCCL-vocabulary XML (topology_xml.h) and read by the
// search (search.h). Nodes keep the XML attributes they came from, so a
// graph dumps back to the file it was loaded from.
#pragma once

#include <string>
#include <tuple>
#include <vector>

namespace ferry {

enum class NodeType { kCpu, kPciSwitch, kGpu, kNvSwitch, kNic, kNet };
enum class LinkType { kNvLink, kXgmi, kPcie, kSys, kNet };

const char* node_type_name(NodeType type);
const char* link_type_name(LinkType type);

// One struct for every node type; fields that do not apply keep defaults.
struct Node {
  NodeType type = NodeType::kCpu;
  int host = 0;     // which machine: graphs of several hosts are appended
  int parent = -1;  // enclosing node in the XML tree; -1 for CPUs and NVSwitches
  std::string busid;  // PCI switch, GPU, NIC: "0000:07:00.0" (lower case)
  // CPU
  int numa_id = -1;
  std::string affinity, arch, vendor;
  // PCI device (switch, GPU, NIC): what the link to the parent runs at
  std::string pci_class, link_speed;
  int link_width = 0;
  // GPU (dev and gdr also on network ports)
  int dev = -1, sm = 0, rank = -1;
  bool gdr = false;
  std::string gcn;  // AMD GPU architecture, e.g. gfx942
  // Network port
  std::string name;
  int speed_mbps = 0, port = 0;

  auto fields() const {
    return std::tie(type, host, parent, busid, numa_id, affinity, arch, vendor, pci_class,
                    link_speed, link_width, dev, sm, rank, gdr, gcn, name, speed_mbps, port);
  }
};

// Links are directed; each physical link appears once in each direction.
struct Link {
  int from = -1, to = -1;
  LinkType type = LinkType::kPcie;
  int count = 1;  // NVLink / xGMI lanes bundled in this link
  double bandwidth_gbps = 0;
  std::string target_busid;  // NVLink to an NVSwitch: which switch chip, for the dump

  auto fields() const { return std::tie(from, to, type, count, bandwidth_gbps, target_busid); }
};

inline bool operator==(const Node& a, const Node& b) { return a.fields() == b.fields(); }
inline bool operator==(const Link& a, const Link& b) { return a.fields() == b.fields(); }

struct SystemGraph {
  std::vector<Node> nodes;
  std::vector<Link> links;
  int host_count = 0;

  int add_node(const Node& node);
  void add_link(const Link& link);
  void add_link_pair(int a, int b, LinkType type, int count, double bandwidth_gbps);
  // The GPU node carrying this rank, or -1.
  int gpu_of_rank(int rank) const;
};

inline bool operator==(const SystemGraph& a, const SystemGraph& b) {
  return a.host_count == b.host_count && a.nodes == b.nodes && a.links == b.links;
}

// Bandwidths in GB/s per direction, the figures NCCL's search assumes.
double nvlink_bandwidth_per_link(int sm);
double xgmi_bandwidth_per_link();
// link_speed as in sysfs ("16.0 GT/s PCIe"); both empty means unknown.
double pcie_bandwidth(const std::string& link_speed, int link_width);
double inter_socket_bandwidth(const std::string& cpu_vendor);
double net_bandwidth(int speed_mbps);

}  // namespace ferry
