// ferry-info's topology sections: what Ferry makes of NCCL-style topology
// XML (--topo FILE...), and the topology the engine would use in this
// process with its search over the ranks of this machine (--discover).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/topology/local_topology.h"
#include "engine/topology/rocm_smi.h"
#include "engine/topology/search.h"
#include "engine/topology/topology_xml.h"
#include "tools/ferry_info.h"

namespace ferry_info {
namespace {

// The search's bandwidth; "-" where nothing limits it (ranks on one GPU).
std::string gbps_text(double gbps) {
  if (std::isinf(gbps)) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", gbps);
  return text;
}

// Paths, transports, rings and trees over the GPUs of gpu_of_rank.
void print_search(const ferry::SystemGraph& graph, const std::vector<int>& gpu_of_rank) {
  const int nranks = static_cast<int>(gpu_of_rank.size());
  for (int r = 0; r < nranks; ++r) {
    const ferry::Node& gpu = graph.nodes[gpu_of_rank[r]];
    if (ferry::is_emulated_gpu(gpu))
      std::printf("  rank %d: host %d, GPU %s (emulated device %d)\n", r, gpu.host, gpu.busid.c_str(), gpu.dev);
    else
      std::printf("  rank %d: host %d, GPU %s (dev %d, sm_%d)\n", r, gpu.host, gpu.busid.c_str(), gpu.dev, gpu.sm);
  }
  const ferry::RankPaths paths = ferry::compute_rank_paths(graph, gpu_of_rank);
  std::printf("\npaths (type, GB/s, transport):\n");
  for (int a = 0; a < nranks; ++a) {
    for (int b = a + 1; b < nranks; ++b) {
      const ferry::GpuPath& path = paths.at(a, b);
      std::printf("  %d-%d: %s %s %s\n", a, b, ferry::path_type_name(path.type), gbps_text(path.bandwidth_gbps).c_str(),
                  ferry::transport_name(ferry::choose_transport(path)));
    }
  }
  std::printf("\nrings:\n");
  const std::vector<ferry::Ring> rings = ferry::search_rings(paths, 2);
  for (std::size_t c = 0; c < rings.size(); ++c) {
    std::printf("  channel %zu (%s GB/s):", c, gbps_text(ferry::ring_bandwidth(paths, rings[c])).c_str());
    for (int r : rings[c]) std::printf(" %d", r);
    std::printf("\n");
  }
  std::printf("\ndouble binary tree (parent of each rank):\n");
  const auto trees = ferry::build_double_binary_tree(rings.empty() ? std::vector<int>{} : rings[0]);
  for (int t = 0; t < 2; ++t) {
    std::printf("  tree %d, root %d:", t, trees[t].root);
    for (int r = 0; r < nranks; ++r) std::printf(" %d", trees[t].parent[r]);
    std::printf("\n");
  }
}

void print_node_tree(const ferry::SystemGraph& graph, int parent, int depth) {
  for (int id = 0; id < static_cast<int>(graph.nodes.size()); ++id) {
    const ferry::Node& node = graph.nodes[id];
    if (node.parent != parent || node.type == ferry::NodeType::kCpu || node.type == ferry::NodeType::kNvSwitch)
      continue;
    std::printf("%*s%s", 2 * depth, "", ferry::node_type_name(node.type));
    switch (node.type) {
      case ferry::NodeType::kGpu:
        if (ferry::is_emulated_gpu(node))
          std::printf(" %s (device %d of the emulated device: host memory that peer processes map)\n",
                      node.busid.c_str(), node.dev);
        else
          std::printf(" %s (dev %d, sm_%d, class %s)\n", node.busid.c_str(), node.dev, node.sm, node.pci_class.c_str());
        break;
      case ferry::NodeType::kNet:
        std::printf(" %s (%d Mb/s%s)\n", node.name.c_str(), node.speed_mbps, node.gdr ? ", GPUDirect RDMA" : "");
        break;
      default:
        std::printf(" %s%s%s\n", node.busid.c_str(), node.link_speed.empty() ? "" : ", ", node.link_speed.c_str());
    }
    print_node_tree(graph, id, depth + 1);
  }
}

}  // namespace

int print_topology(int files, char** file_names) {
  ferry::SystemGraph graph;
  for (int i = 0; i < files; ++i) {
    std::string error;
    if (!ferry::ok(ferry::load_topology_file(file_names[i], graph, &error))) {
      std::fprintf(stderr, "ferry-info: %s\n", error.c_str());
      return 1;
    }
  }
  int nranks = 0;
  while (graph.gpu_of_rank(nranks) >= 0) ++nranks;
  std::vector<int> gpu_of_rank;
  if (nranks == 0 || !ferry::ok(ferry::find_rank_gpus(graph, nranks, gpu_of_rank))) {
    std::fprintf(stderr, "ferry-info: no GPUs with rank attributes 0..n-1 in the topology\n");
    return 1;
  }
  std::printf("%d host(s), %d GPU(s) with ranks\n", graph.host_count, nranks);
  print_search(graph, gpu_of_rank);
  return 0;
}

// The topology the engine would use in this process, and the search over
// nranks ranks of this machine (0: one per GPU).
int print_local_topology(int nranks) {
  const ferry::LocalTopology& topo = ferry::local_topology();
  if (!topo.available) {
    std::printf("topology: none (%s)\n", topo.error.c_str());
    std::printf("engine: ranks of one machine use p2p (shm with FERRY_P2P_DISABLE=1), as without a topology\n");
    return 1;
  }
  std::printf("topology: %s", topo.source.c_str());
  if (topo.discovery.hwloc) std::printf(", %.1f ms", topo.discovery.milliseconds);
  std::printf("\n");
  if (!topo.dump_path.empty()) std::printf("written to %s\n", topo.dump_path.c_str());
  const ferry::SystemGraph& graph = topo.graph;
  std::vector<int> gpus, emulated;
  for (int id = 0; id < static_cast<int>(graph.nodes.size()); ++id) {
    const ferry::Node& node = graph.nodes[id];
    if (node.type == ferry::NodeType::kGpu) (ferry::is_emulated_gpu(node) ? emulated : gpus).push_back(id);
    if (node.type != ferry::NodeType::kCpu) continue;
    std::printf("  CPU numa %d (affinity %s%s%s%s%s)\n", node.numa_id, node.affinity.c_str(),
                node.arch.empty() ? "" : ", ", node.arch.c_str(), node.vendor.empty() ? "" : ", ", node.vendor.c_str());
    print_node_tree(graph, id, 2);
  }
  for (const ferry::Link& link : graph.links) {
    if (link.type != ferry::LinkType::kNvLink && link.type != ferry::LinkType::kXgmi) continue;
    const ferry::Node& from = graph.nodes[link.from];
    const ferry::Node& to = graph.nodes[link.to];
    if (from.type != ferry::NodeType::kGpu) continue;
    std::printf("  %s %s -> %s: %d link(s), %.1f GB/s\n", ferry::link_type_name(link.type), from.busid.c_str(),
                to.type == ferry::NodeType::kNvSwitch ? "NVSwitch" : to.busid.c_str(), link.count, link.bandwidth_gbps);
  }
  // What ROCm SMI says, GPU by GPU and pair by pair, where discovery asked it.
  if (topo.discovery.rocm_smi) std::printf("%s", ferry::describe_rocm_smi(ferry::scan_rocm_smi()).c_str());
  if (gpus.empty() && emulated.empty()) {
    std::printf("\nno GPUs in the topology: ranks of this machine use p2p (shm with FERRY_P2P_DISABLE=1)\n");
    return 0;
  }
  if (!emulated.empty()) {
    // This process runs on the emulated device, as every rank of the machine would: on its device 0.
    const ferry::RankPaths shared = ferry::compute_rank_paths(graph, {emulated[0], emulated[0]});
    std::printf("\nemulated-device ranks of this machine: %s (they share emulated device 0; path %s)\n",
                ferry::transport_name(ferry::choose_transport(shared.at(0, 1))),
                ferry::path_type_name(shared.at(0, 1).type));
    gpus = emulated;
  } else {
    std::printf("\nCUDA ranks of this machine: %s (the worst pair of its %zu GPU(s))\n",
                ferry::transport_name(ferry::worst_transport_between_gpus(graph, 0)), gpus.size());
  }
  // Ranks named in the file, else round robin over the GPUs.
  std::vector<int> gpu_of_rank;
  int ranked = 0;
  while (graph.gpu_of_rank(ranked) >= 0) ++ranked;
  const bool from_file = ranked > 0 && nranks == 0 && ok(ferry::find_rank_gpus(graph, ranked, gpu_of_rank));
  if (!from_file) {
    gpu_of_rank.clear();
    if (nranks == 0) nranks = static_cast<int>(gpus.size());
    for (int r = 0; r < nranks; ++r) gpu_of_rank.push_back(gpus[r % gpus.size()]);
  }
  std::printf("\n%zu rank(s):\n", gpu_of_rank.size());
  print_search(graph, gpu_of_rank);
  return 0;
}

}  // namespace ferry_info
