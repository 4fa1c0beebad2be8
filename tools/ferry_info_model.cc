// ferry-info --model: the tuner's predicted time and bus bandwidth of one
// blocking allreduce for 2..4096 ranks, ring against tree, and the direct
// algorithms where every peer is mapped, on one of the tuner's machine
// models.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/collectives/tuner.h"
#include "tools/ferry_info.h"

namespace ferry_info {
namespace {

bool parse_bytes(const std::string& text, std::size_t* out) {
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return false;
  switch (*end) {
    case 'K': case 'k': value <<= 10; ++end; break;
    case 'M': case 'm': value <<= 20; ++end; break;
    case 'G': case 'g': value <<= 30; ++end; break;
    default: break;
  }
  if (*end != '\0') return false;
  *out = value;
  return true;
}

std::string size_name(std::size_t bytes) {
  const char* units[] = {"", "K", "M", "G"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) bytes /= 1024, ++unit;
  return std::to_string(bytes) + units[unit];
}

int print_model(const std::vector<std::size_t>& sizes, const ferry::MachineModel& machine) {
  using ferry::AllreduceAlgorithm;
  std::printf("allreduce model, machine %s: %s\n", machine.name, machine.description);
  std::printf("launch + sync %.1f us a call, %.1f us on the engine worker", machine.launch_us, machine.worker_us);
  for (ferry::LinkKind kind : {machine.intra, machine.inter}) {
    const ferry::LinkCost& link = ferry::link_cost(kind);
    std::printf("; %s %.2f us a hop, %.1f GB/s", link.name, link.hop_us, link.bandwidth_gbps);
    if (machine.intra == machine.inter) break;
  }
  if (machine.gpus_per_node > 0) std::printf("; %d GPUs a node", machine.gpus_per_node);
  const bool nodes = machine.gpus_per_node > 0;
  std::printf("\ntime of one blocking call in us; busbw in GB/s = 2(n-1)/n * bytes / time (nccl-tests);\n"
              "direct algorithms only where every peer is mapped; %spick = the runtime's choice (not in place%s)\n\n",
              nodes ? "hier: by node (within, across among shard holders, gathered); " : "",
              nodes ? "; across nodes: hier+ring or hier+tree (the step across nodes), or staged through the real "
                      "MPI below FERRY_NET_MIN_BYTES"
                    : "");
  std::printf("%8s %6s %11s %9s %11s %9s ", "bytes", "ranks", "ring us", "busbw", "tree us", "busbw");
  if (nodes) std::printf("%11s %9s ", "hier us", "busbw");
  std::printf("%11s %11s %11s %11s %11s %11s  %-7s %s\n", "ll us", "ll128 us", "oneshot us", "twoshot us",
              "copyeng us", "cepush us", "faster", "pick");
  const auto cell = [&](AllreduceAlgorithm a, std::size_t bytes, int n) {
    const double us = ferry::predict_allreduce_us(a, bytes, n, machine);
    char text[32];
    if (us < 0) std::snprintf(text, sizeof text, "-");
    else std::snprintf(text, sizeof text, "%.1f", us);
    return std::string(text);
  };
  for (std::size_t bytes : sizes) {
    for (int n = 2; n <= 4096; n *= 2) {
      const double ring = ferry::predict_allreduce_us(AllreduceAlgorithm::kRing, bytes, n, machine);
      const double tree = ferry::predict_allreduce_us(AllreduceAlgorithm::kTree, bytes, n, machine);
      const double hier = ferry::predict_hierarchical_allreduce_us(bytes, n, machine);
      const bool direct = ferry::algorithm_applies(AllreduceAlgorithm::kOneShot, n, machine);
      const char* faster = ring < tree ? "ring" : "tree";
      if (hier >= 0 && hier < std::min(ring, tree)) faster = "hier";
      const std::string pick = direct ? ferry::algorithm_info(ferry::model_allreduce(n, bytes, false, machine)).name
                               : hier >= 0 ? ferry::across_nodes_choice(bytes, n, machine)
                                           : "-";
      std::printf("%8s %6d %11.1f %9.2f %11.1f %9.2f ", size_name(bytes).c_str(), n, ring,
                  ferry::allreduce_busbw_gbps(bytes, n, ring), tree, ferry::allreduce_busbw_gbps(bytes, n, tree));
      if (nodes) {
        if (hier >= 0) std::printf("%11.1f %9.2f ", hier, ferry::allreduce_busbw_gbps(bytes, n, hier));
        else std::printf("%11s %9s ", "-", "-");
      }
      std::printf("%11s %11s %11s %11s %11s %11s  %-7s %s\n", cell(AllreduceAlgorithm::kOneShotLl, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kOneShotLl128, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kOneShot, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kTwoShot, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kCopyEngine, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kCopyPush, bytes, n).c_str(), faster, pick.c_str());
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int model_command(int argc, char** argv) {
  std::vector<std::size_t> sizes = {8, 16 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20};
  const ferry::MachineModel* machine = &ferry::default_machine_model();
  for (int i = 0; i < argc; i += 2) {
    const std::string option = argv[i];
    if (i + 1 >= argc) return -1;
    const std::string value = argv[i + 1];
    if (option == "--machine") {
      machine = ferry::find_machine_model(value);
      if (!machine) return -1;
    } else if (option == "--bytes") {
      sizes.clear();
      std::size_t start = 0;
      for (;;) {
        const std::size_t comma = value.find(',', start);
        std::size_t bytes = 0;
        if (!parse_bytes(value.substr(start, comma == std::string::npos ? comma : comma - start), &bytes)) return -1;
        sizes.push_back(bytes);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else {
      return -1;
    }
  }
  return print_model(sizes, *machine);
}

}  // namespace ferry_info
