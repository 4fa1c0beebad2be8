// ferry-info's report of this build and process: version, device backend and
// devices, the net transport's providers, the algorithms FERRY_TUNE can name, and every parameter's value,
// or the parameter table as Markdown.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/collectives/tuner.h"
#include "engine/common/params.h"
#include "engine/core/net_channel.h"
#include "engine/gpu/gpu.h"
#include "ferry/ferry.h"
#include "tools/ferry_info.h"

#ifdef FERRY_HAVE_IBVERBS
#include "engine/topology/local_topology.h"
#include "engine/topology/search.h"
#include "engine/transport/ib_network.h"
#include "engine/transport/ib_verbs.h"
#endif

namespace ferry_info {

void print_markdown_table() {
  std::printf("| variable | type | default | description |\n| --- | --- | --- | --- |\n");
  for (const ferry::ParamInfo& p : ferry::describe_params()) {
    std::printf("| `%s` | %s | `%s` | %s |\n", p.env_name.c_str(), p.type,
                *p.default_value ? p.default_value : "(empty)", p.description);
  }
}

namespace {

// The net transport's providers, as this machine offers them.
void print_networks() {
  std::printf("\nnet transport providers (FERRY_NET=%s: %s here):\n", ferry::params().net.c_str(),
              ferry::net_provider_here().c_str());
#ifdef FERRY_HAVE_IBVERBS
  std::string why;
  const std::vector<ferry::IbPort> ports = ferry::ib_ports(&why);
  if (ports.empty()) std::printf("  ib     %s\n", why.c_str());
  for (const ferry::IbPort& port : ports)
    std::printf("  ib     %s:%d %s, %s, MTU %d\n", port.device.c_str(), port.port, port.active ? "active" : "down",
                port.ethernet ? "RoCE" : "InfiniBand", port.mtu_bytes);
  if (!ports.empty() && !ferry::ib_port_here(&why)) std::printf("  ib     %s\n", why.c_str());
  // Which ports each GPU's ranks take first: those nearest it.
  const ferry::LocalTopology* topology = ports.empty() ? nullptr : &ferry::local_topology();
  for (int i = 0; topology && topology->available && i < static_cast<int>(topology->graph.nodes.size()); ++i) {
    const ferry::Node& gpu = topology->graph.nodes[i];
    if (gpu.type != ferry::NodeType::kGpu || gpu.host != 0) continue;
    const std::vector<ferry::NetPortReach> reach = ferry::net_ports_from(topology->graph, i);
    std::string nearest;
    for (const std::string& name : ferry::nearest_net_ports(topology->graph, i)) nearest += " " + name;
    std::printf("  ib     GPU %d: nearest%s (%s)\n", gpu.dev, nearest.empty() ? " none" : nearest.c_str(),
                reach.empty() ? "no NIC in the topology" : ferry::path_type_name(reach.front().type));
  }
#else
  std::printf("  ib     not built (no infiniband/verbs.h at build time)\n");
#endif
  std::printf("  mpi    the application's MPI\n  socket TCP, FERRY_SOCKET_IFNAME=%s\n",
              ferry::params().socket_ifname.empty() ? "(first interface up)" : ferry::params().socket_ifname.c_str());
  const std::string problem = ferry::net_setting_problem();
  if (!problem.empty()) std::printf("  problem: %s\n", problem.c_str());
}

// How kernels (ferry/device.h) reach window ranks on other machines.
void print_gda() {
  std::printf("\nGPU-initiated access to other machines (GDA, ferry/device.h):\n");
  std::printf("  proxy  every rank on another machine: a thread of this process drains the kernels' queue\n"
              "         (FERRY_GDA_RING_SLOTS=%lld) over the ib provider where every rank has an RDMA port\n"
              "         (FERRY_NET auto or ib), else over the socket provider\n",
              static_cast<long long>(ferry::params().gda_ring_slots));
  std::printf("  ibgda  not used: the mlx5 encoders are built and tested, no provider drives a NIC yet\n");
  std::printf("  (ranks of this machine that p2p reaches are mapped: kernels load and store there)\n");
}

}  // namespace

void print_report() {
  std::printf("Ferry %d.%d.%d\n\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH);
#if defined(FERRY_HAVE_CUDA)
  std::printf("built with: CUDA backend, emulated device\n");
#elif defined(FERRY_HAVE_HIP)
  std::printf("built with: HIP backend (not yet run on AMD hardware), emulated device\n");
#else
  std::printf("built with: emulated device (no CUDA toolkit at build time)\n");
#endif
  ferry::gpu::Backend* backend = ferry::gpu::active_backend();
  std::printf("device backend: %s\n",
              ferry::gpu::backend_kind_name(backend ? backend->kind() : ferry::gpu::BackendKind::kNone));
  const std::string device_problem = ferry::gpu::device_setting_problem();
  if (!device_problem.empty()) std::printf("  %s\n", device_problem.c_str());
  if (backend) std::printf("%s\n", backend->describe_devices().c_str());
  print_networks();
  print_gda();

  std::printf("\nallreduce algorithms (FERRY_TUNE=allreduce:MIN-MAX:name,...):\n");
  for (int a = 0; a < static_cast<int>(ferry::AllreduceAlgorithm::kCount); ++a) {
    const ferry::AlgorithmInfo& info = ferry::algorithm_info(static_cast<ferry::AllreduceAlgorithm>(a));
    std::printf("  %-11s %s%s%s\n", info.name, info.description, info.in_place_safe ? "" : " (not in place)",
                info.implemented ? "" : " (model only)");
  }
  std::printf("\nbcast algorithms (FERRY_TUNE=bcast:MIN-MAX:name,...):\n");
  for (int a = 0; a < static_cast<int>(ferry::BcastAlgorithm::kCount); ++a) {
    const ferry::BcastAlgorithmInfo& info = ferry::bcast_algorithm_info(static_cast<ferry::BcastAlgorithm>(a));
    std::printf("  %-11s %s\n", info.name, info.description);
  }
  std::printf("\nsteps across machines (FERRY_TUNE=allreduce-across:MIN-MAX:name,bcast-across:MIN-MAX:name):\n");
  for (int a = 0; a < static_cast<int>(ferry::AcrossAlgorithm::kCount); ++a) {
    const ferry::AcrossAlgorithmInfo& info = ferry::across_algorithm_info(static_cast<ferry::AcrossAlgorithm>(a));
    std::printf("  %-11s %s (%s)\n", info.name, info.description,
                info.allreduce && info.bcast ? "allreduce, bcast" : info.allreduce ? "allreduce" : "bcast");
  }

  std::printf("\nparameters (set in the environment marked *):\n");
  for (const ferry::ParamInfo& p : ferry::describe_params()) {
    std::printf("%c %-30s = %-12s %s\n", p.set_in_environment ? '*' : ' ', p.env_name.c_str(),
                p.value.empty() ? "\"\"" : p.value.c_str(), p.description);
  }
  for (const std::string& problem : ferry::param_problems()) std::printf("warning: %s\n", problem.c_str());
}

}  // namespace ferry_info
