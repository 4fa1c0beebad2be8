// The topology the engine uses in this process: the file FERRY_TOPO_FILE
// names, else this machine as discovery finds it. Worked out once per
// process, on first use, so processes that never use the engine pay nothing.
#pragma once

#include <string>
#include <vector>

#include "engine/gpu/gpu.h"
#include "engine/topology/discovery.h"
#include "engine/topology/system_graph.h"

namespace ferry {

struct LocalTopology {
  bool available = false;     // graph describes this machine
  SystemGraph graph;
  std::string source;         // where the graph came from, for logs and ferry-info
  std::string error;          // why there is no graph (a bad file: its name and line)
  std::string dump_path;      // where the graph was written, if asked
  DiscoveryReport discovery;  // what discovery found, when it ran
};

// What FERRY_TOPO_FILE and FERRY_TOPO_DUMP_FILE say, computed on the first
// call and kept; thread-safe. A discovered graph holds the emulated device's
// GPUs when the process runs on it, so the first call picks the device
// backend (gpu::active_backend()) unless FERRY_TOPO_FILE is set.
const LocalTopology& local_topology();

// The same for explicit settings, uncached: topo_file empty means discover,
// adding emulated_devices GPUs of the emulated device (0: none); dump_file,
// when not empty, receives the graph as XML (%h: host name, %p: process id).
LocalTopology load_local_topology(const std::string& topo_file, const std::string& dump_file,
                                  int emulated_devices);

// The graph the engine plans with for backend's devices, or nullptr: read
// only where it can change an answer. Discovery would add the emulated
// device as one GPU that all ranks of the machine share (p2p, the answer
// without a topology), so without a file or a dump to write there is
// nothing to discover for it.
const SystemGraph* topology_for(const gpu::Backend* backend);

// The network ports nearest this process's GPU ("device:port",
// nearest_net_ports in search.h), where topology_for gives a graph; empty
// otherwise.
std::vector<std::string> nearest_net_ports_here();

}  // namespace ferry
