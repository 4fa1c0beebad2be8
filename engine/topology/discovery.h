// Discovery of this machine into the system graph: hwloc for CPUs (one per
// NUMA node), the PCI tree, GPUs (NVIDIA and AMD display/3D controllers)
// and NICs (verbs devices, else network interfaces); NVML for NVLink.
// Like NCCL, discovery writes topology XML and the graph is loaded from it,
// so a discovered machine and a file describe machines the same way.
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
  double milliseconds = 0;
};

// This machine as NCCL-vocabulary XML (GPUs carry rank="-1"). kUnavailable
// when Ferry was built without hwloc; report says what was found either way.
Status discover_topology_xml(std::string* xml, DiscoveryReport* report);

// Appends this machine to graph as a new host.
Status discover_topology(SystemGraph& graph, DiscoveryReport* report);

}  // namespace ferry
