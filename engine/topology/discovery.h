// Discovery of this machine into the system graph: hwloc for CPUs (one per
// NUMA node), the PCI tree, GPUs (NVIDIA display/3D controllers; AMD
// display controllers and processing accelerators) and NICs (verbs
// devices, else network interfaces); NVML for NVLink, ROCm SMI for xGMI.
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

#include <map>
#include <string>

#include "engine/common/status.h"
#include "engine/topology/rocm_smi.h"
#include "engine/topology/system_graph.h"

namespace ferry {

struct DiscoveryReport {
  bool hwloc = false;      // hwloc built in and its topology loaded
  std::string hwloc_note;  // hwloc's version, or why there is no hwloc
  bool nvml = false;       // NVML loaded (NVLink links known)
  std::string nvml_note;   // driver version, or why there is no NVML
  bool rocm_smi = false;      // ROCm SMI loaded and initialised (xGMI links known)
  std::string rocm_smi_note;  // its version and library, or why there is no ROCm SMI
  int numa_nodes = 0, pci_switches = 0, gpus = 0, nics = 0, nvlink_links = 0, xgmi_links = 0;
  int nvidia_gpus = 0, amd_gpus = 0;  // of gpus
  int rocm_smi_gpus = 0;              // of amd_gpus, those ROCm SMI reports
  int emulated_gpus = 0;  // the emulated device's, not among gpus
  double milliseconds = 0;
};

// This machine as NCCL-vocabulary XML (GPUs carry rank="-1"), with
// emulated_devices GPUs of the emulated device (0: none). kUnavailable
// when Ferry was built without hwloc; report says what was found either way.
Status discover_topology_xml(int emulated_devices, std::string* xml, DiscoveryReport* report);

// Appends this machine to graph as a new host.
Status discover_topology(int emulated_devices, SystemGraph& graph, DiscoveryReport* report);

// The <xgmi> elements (RCCL's form: one per GPU, each GPU lists its own
// side) that discovery writes into the <gpu> at busid, from ROCm SMI's
// answers: one per GPU it reaches over one xGMI hop, with the number of
// links. gpus holds the bus id and PCI class of each GPU of the XML; a link
// to any other GPU is left out. depth: indentation, in steps of two spaces;
// links, when given, grows by the number of links written.
std::string xgmi_elements(const RocmSmiScan& scan, const std::string& busid,
                          const std::map<std::string, std::string>& gpus, int depth, int* links = nullptr);

// A GPU of the emulated device, as discovery describes it.
bool is_emulated_gpu(const Node& node);

}  // namespace ferry
