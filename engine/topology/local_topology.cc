#include "engine/topology/local_topology.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "engine/common/host_name.h"
#include "engine/common/params.h"
#include "engine/gpu/gpu.h"
#include "engine/topology/search.h"
#include "engine/topology/topology_xml.h"

namespace ferry {
namespace {

// Written beside the target and renamed, so ranks of one machine that dump
// to the same name never leave a torn file.
bool write_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream file(temporary, std::ios::trunc);
    if (!(file << text) || !(file.flush())) return false;
  }
  if (std::rename(temporary.c_str(), path.c_str()) == 0) return true;
  std::remove(temporary.c_str());
  return false;
}

}  // namespace

LocalTopology load_local_topology(const std::string& topo_file, const std::string& dump_file,
                                  int emulated_devices) {
  LocalTopology topo;
  if (!topo_file.empty()) {
    topo.source = "FERRY_TOPO_FILE=" + topo_file;
    topo.available = ok(load_topology_file(topo_file, topo.graph, &topo.error));
    if (!topo.available)
      FERRY_WARN(Topo, "FERRY_TOPO_FILE: %s; the engine chooses transports without a topology", topo.error.c_str());
  } else {
    topo.source = "discovered";
    topo.available = ok(discover_topology(emulated_devices, topo.graph, &topo.discovery));
    topo.source += " (" + topo.discovery.hwloc_note + "; NVML: " + topo.discovery.nvml_note +
                   "; rocm-smi: " + topo.discovery.rocm_smi_note + ")";
    if (!topo.available) topo.error = "discovery failed: " + topo.discovery.hwloc_note;
  }
  if (!topo.available) topo.graph = SystemGraph{};

  if (topo.available && !dump_file.empty()) {
    const std::string path = expand_host_and_pid(dump_file);
    if (write_atomically(path, dump_topology_xml(topo.graph, 0))) {
      topo.dump_path = path;
      FERRY_INFO(Topo, "topology written to %s", path.c_str());
    } else {
      FERRY_WARN(Topo, "FERRY_TOPO_DUMP_FILE: cannot write %s", path.c_str());
    }
  }
  FERRY_INFO(Topo, "topology: %s", topo.available ? topo.source.c_str() : topo.error.c_str());
  return topo;
}

const LocalTopology& local_topology() {
  static const LocalTopology* topo = [] {
    const gpu::Backend* backend = params().topo_file.empty() ? gpu::active_backend() : nullptr;
    const int emulated_devices =
        backend && !backend->physical_devices() ? backend->device_count() : 0;
    return new LocalTopology(load_local_topology(params().topo_file, params().topo_dump_file, emulated_devices));
  }();
  return *topo;
}

const SystemGraph* topology_for(const gpu::Backend* backend) {
  const bool wanted = !params().topo_file.empty() || !params().topo_dump_file.empty() ||
                      (backend && backend->physical_devices());
  if (!wanted) return nullptr;
  const LocalTopology& topo = local_topology();
  return topo.available ? &topo.graph : nullptr;
}

std::vector<std::string> nearest_net_ports_here() {
  gpu::Backend* backend = gpu::active_backend();
  const SystemGraph* graph = topology_for(backend);
  int device = -1;
  if (!graph || !backend || !backend->chosen_device(&device)) return {};
  for (int i = 0; i < static_cast<int>(graph->nodes.size()); ++i) {
    const Node& node = graph->nodes[i];
    if (node.type == NodeType::kGpu && node.host == 0 && node.dev == device) return nearest_net_ports(*graph, i);
  }
  return {};
}

}  // namespace ferry
