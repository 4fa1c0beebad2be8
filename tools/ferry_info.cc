// ferry-info: what Ferry sees on this machine and how it is configured.
//   ferry-info             version, device backend, devices, parameters
//   ferry-info --markdown  the parameter table as Markdown (README.md's)
//   ferry-info --topo FILE [FILE...]
//                          what Ferry makes of NCCL-style topology XML (one
//                          file per host): GPUs by rank, the path and
//                          transport between every pair, rings and trees
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/collectives/tuner.h"
#include "engine/common/params.h"
#include "engine/topology/search.h"
#include "engine/topology/topology_xml.h"
#include "engine/gpu/gpu.h"
#include "ferry/ferry.h"

namespace {

void print_markdown_table() {
  std::printf("| variable | type | default | description |\n| --- | --- | --- | --- |\n");
  for (const ferry::ParamInfo& p : ferry::describe_params()) {
    std::printf("| `%s` | %s | `%s` | %s |\n", p.env_name.c_str(), p.type,
                *p.default_value ? p.default_value : "(empty)", p.description);
  }
}

void print_report() {
  std::printf("Ferry %d.%d.%d\n\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH);
#ifdef FERRY_HAVE_CUDA
  std::printf("built with: CUDA backend, emulated device\n");
#else
  std::printf("built with: emulated device (no CUDA toolkit at build time)\n");
#endif
  ferry::gpu::Backend* backend = ferry::gpu::active_backend();
  std::printf("device backend: %s\n",
              ferry::gpu::backend_kind_name(backend ? backend->kind() : ferry::gpu::BackendKind::kNone));
  if (backend) std::printf("%s\n", backend->describe_devices().c_str());

  std::printf("\nallreduce algorithms (FERRY_TUNE=allreduce:MIN-MAX:name,...):\n");
  for (int a = 0; a < static_cast<int>(ferry::AllreduceAlgorithm::kCount); ++a) {
    const ferry::AlgorithmInfo& info = ferry::algorithm_info(static_cast<ferry::AllreduceAlgorithm>(a));
    std::printf("  %-11s %s%s\n", info.name, info.description, info.in_place_safe ? "" : " (not in place)");
  }

  std::printf("\nparameters (set in the environment marked *):\n");
  for (const ferry::ParamInfo& p : ferry::describe_params()) {
    std::printf("%c %-30s = %-12s %s\n", p.set_in_environment ? '*' : ' ', p.env_name.c_str(),
                p.value.empty() ? "\"\"" : p.value.c_str(), p.description);
  }
  for (const std::string& problem : ferry::param_problems()) std::printf("warning: %s\n", problem.c_str());
}

int print_topology(int files, char** file_names) {
  ferry::SystemGraph graph;
  for (int i = 0; i < files; ++i) {
    std::string error;
    if (!ferry::ok(ferry::load_topology_file(file_names[i], graph, &error))) {
      std::fprintf(stderr, "ferry-info: %s: %s\n", file_names[i], error.c_str());
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
  for (int r = 0; r < nranks; ++r) {
    const ferry::Node& gpu = graph.nodes[gpu_of_rank[r]];
    std::printf("  rank %d: host %d, GPU %s (dev %d, sm_%d)\n", r, gpu.host, gpu.busid.c_str(), gpu.dev, gpu.sm);
  }
  const ferry::RankPaths paths = ferry::compute_rank_paths(graph, gpu_of_rank);
  std::printf("\npaths (type, GB/s, transport):\n");
  for (int a = 0; a < nranks; ++a) {
    for (int b = a + 1; b < nranks; ++b) {
      const ferry::GpuPath& path = paths.at(a, b);
      std::printf("  %d-%d: %s %.1f %s\n", a, b, ferry::path_type_name(path.type), path.bandwidth_gbps,
                  ferry::transport_name(ferry::choose_transport(path)));
    }
  }
  std::printf("\nrings:\n");
  const std::vector<ferry::Ring> rings = ferry::search_rings(paths, 2);
  for (std::size_t c = 0; c < rings.size(); ++c) {
    std::printf("  channel %zu (%.1f GB/s):", c, ferry::ring_bandwidth(paths, rings[c]));
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
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--markdown") == 0) {
    print_markdown_table();
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[1], "--topo") == 0) return print_topology(argc - 2, argv + 2);
  if (argc > 1) {
    std::fprintf(stderr, "usage: ferry-info [--markdown | --topo FILE...]\n");
    return 2;
  }
  print_report();
  return 0;
}
