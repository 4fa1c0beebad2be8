// Discovery of this machine into the system graph: hwloc for CPUs (one per
// NUMA node), the PCI tree, GPUs (NVIDIA and AMD display/3D controllers)
// and NICs (verbs devices, else network interfaces); NVML for NVLink.
// Like NCCL, discovery writes topology XML and the graph is loaded from it,
// so a discovered machine and a file describe machines the same way.
//
// A process on the emulated device may have its devices described too: a
// GPU per device, on the first CPU, with busid "emulated:N" and no PCI
// speed. Every process of the machine runs on emulated device 0 (host
// memory, which peer processes map), so ranks there share one GPU node:
// the search's path between them is LOC, its transport P2P, as the engine
// uses.
#pragma once

#include <string>

#include "engine/common/status.h"
#include "engine/topology/system_graph.h"

namespace ferry {

struct DiscoveryReport {
  bool hwloc = false;      // hwloc built in and its topology loaded
  std::string hwloc_note;  // hwloc's version, or why there is no hwloc
  bool nvml = false;       // NVML loaded (NVLink links known)
  std::string nvml_note;   // driver version, or why there is no NVML
  int numa_nodes = 0, pci_switches = 0, gpus = 0, nics = 0, nvlink_links = 0;
  int nvidia_gpus = 0;  // of gpus
  int emulated_gpus = 0;  // the emulated device's, not among gpus
  double milliseconds = 0;
};

// This machine as NCCL-vocabulary XML (GPUs carry rank="-1"), with
// emulated_devices GPUs of the emulated device (0: none). kUnavailable
// when Ferry was built without hwloc; report says what was found either way.
Status discover_topology_xml(int emulated_devices, std::string* xml, DiscoveryReport* report);

// Appends this machine to graph as a new host.
Status discover_topology(int emulated_devices, SystemGraph& graph, DiscoveryReport* report);

// A GPU of the emulated device, as discovery describes it.
bool is_emulated_gpu(const Node& node);

}  // namespace ferry
