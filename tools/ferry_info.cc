// ferry-info: what Ferry sees on this machine and how it is configured.
//   ferry-info             version, device backend, devices, parameters
//   ferry-info --markdown  the parameter table as Markdown (README.md's)
//   ferry-info --topo FILE [FILE...]
//                          what Ferry makes of NCCL-style topology XML (one
//                          file per host): GPUs by rank, the path and
//                          transport between every pair, rings and trees
//   ferry-info --discover [--ranks N]   (or --topo with no file)
//                          the topology the engine would use here
//                          (FERRY_TOPO_FILE, else discovered), and the
//                          search over N ranks of this machine
//   ferry-info --self-test checks a user debugging a cluster wants, one
//                          PASS/FAIL/SKIP line each; exits 1 on a failure
//   ferry-info --model [--bytes LIST] [--machine nvlink|pcie|multinode]
//                          the tuner's predicted allreduce time and bus
//                          bandwidth for 2..4096 ranks: ring vs tree, and
//                          the direct algorithms where they apply
//   ferry-info --version, --help
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "engine/collectives/communicator.h"
#include "engine/collectives/tuner.h"
#include "engine/common/params.h"
#include "engine/topology/discovery.h"
#include "engine/topology/local_topology.h"
#include "engine/topology/nvml.h"
#include "engine/topology/rocm_smi.h"
#include "engine/topology/search.h"
#include "engine/topology/topology_xml.h"
#include "engine/gpu/gpu.h"
#include "ferry/ferry.h"

#ifdef FERRY_INFO_HAVE_PMIX
#include "engine/bootstrap/pmix_bootstrap.h"
#endif

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
  const std::string device_problem = ferry::gpu::device_setting_problem();
  if (!device_problem.empty()) std::printf("  %s\n", device_problem.c_str());
  if (backend) std::printf("%s\n", backend->describe_devices().c_str());

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

  std::printf("\nparameters (set in the environment marked *):\n");
  for (const ferry::ParamInfo& p : ferry::describe_params()) {
    std::printf("%c %-30s = %-12s %s\n", p.set_in_environment ? '*' : ' ', p.env_name.c_str(),
                p.value.empty() ? "\"\"" : p.value.c_str(), p.description);
  }
  for (const std::string& problem : ferry::param_problems()) std::printf("warning: %s\n", problem.c_str());
}

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

// ---- self-test ------------------------------------------------------------

struct SelfTest {
  int passed = 0, skipped = 0, failed = 0;
  // Under a launcher only rank 0 prints everything; other ranks print their
  // failures, named.
  bool quiet = false;
  std::string prefix;

  void pass(const char* check, const std::string& detail) { report("PASS", check, detail, passed); }
  void skip(const char* check, const std::string& detail) { report("SKIP", check, detail, skipped); }
  void fail(const char* check, const std::string& detail) { report("FAIL", check, detail, failed); }

  void report(const char* verdict, const char* check, const std::string& detail, int& counter) {
    ++counter;
    if (quiet && &counter != &failed) return;
    std::printf("%s%s %s: %s\n", prefix.c_str(), verdict, check, detail.c_str());
    std::fflush(stdout);
  }
};

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// What the shm transport does: a memfd segment that another process opens
// through /proc/PID/fd (ptrace rules and hidepid mounts can forbid that).
void check_shared_memory(SelfTest& test) {
  const char* check = "shared memory";
  const std::size_t bytes = static_cast<std::size_t>(ferry::params().shm_segment_bytes);
  const int fd = memfd_create("ferry-self-test", MFD_CLOEXEC);
  if (fd < 0) return test.fail(check, std::string("memfd_create: ") + std::strerror(errno));
  void* view = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      (view = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    close(fd);
    return test.fail(check, "cannot map a segment of " + mib(bytes) + " (FERRY_SHM_SEGMENT_BYTES): " +
                                std::strerror(errno));
  }
  auto* words = static_cast<unsigned*>(view);
  const std::size_t count = bytes / sizeof(unsigned);
  for (std::size_t i = 0; i < count; ++i) words[i] = static_cast<unsigned>(i * 2654435761u);

  const std::string path = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
  const pid_t child = fork();
  if (child == 0) {
    // The peer: open the segment by path, check it, and answer through it.
    const int peer_fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (peer_fd < 0) _exit(2);
    void* peer = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, peer_fd, 0);
    if (peer == MAP_FAILED) _exit(3);
    auto* seen = static_cast<unsigned*>(peer);
    for (std::size_t i = 0; i < count; ++i)
      if (seen[i] != static_cast<unsigned>(i * 2654435761u)) _exit(4);
    seen[0] = 0xfe77u;
    _exit(0);
  }
  int status = -1;
  if (child > 0) waitpid(child, &status, 0);
  const int code = child > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const bool answered = words[0] == 0xfe77u;
  munmap(view, bytes);
  close(fd);
  if (code == 0 && answered)
    return test.pass(check, "a memfd segment of " + mib(bytes) + " is shared with another process through " +
                                "/proc/PID/fd");
  const char* why = code == 2   ? "the other process cannot open /proc/PID/fd/N (ptrace scope or hidepid?)"
                    : code == 3 ? "the other process cannot map the segment"
                    : code == 4 ? "the other process sees different bytes"
                                : "the other process failed";
  test.fail(check, why);
}

// Device allocation and copies both ways, on every device.
void check_device_memory(SelfTest& test, ferry::gpu::Backend* backend) {
  const char* check = "device memory";
  if (!backend) return test.skip(check, "no device backend");
  constexpr std::size_t kBytes = 1 << 20;
  std::vector<unsigned char> in(kBytes), out(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) in[i] = static_cast<unsigned char>(i * 7 + 1);
  for (int d = 0; d < backend->device_count(); ++d) {
    void* buffer = nullptr;
    bool good = ferry::ok(backend->set_device(d)) && ferry::ok(backend->device_alloc(kBytes, &buffer)) &&
                ferry::ok(backend->copy(buffer, in.data(), kBytes)) &&
                ferry::ok(backend->copy(out.data(), buffer, kBytes)) && in == out;
    if (buffer) FERRY_LOG_IF_FAILED(backend->device_free(buffer));
    if (!good) return test.fail(check, "device " + std::to_string(d) + ": allocate and copy 1 MiB both ways failed");
  }
  test.pass(check, std::to_string(backend->device_count()) + " device(s): 1 MiB copied in and out, bytes match");
}

// Copies between every pair of devices through the backend, checked and
// timed (whether the driver allows peer access is NVML's check).
void check_peer_access(SelfTest& test, ferry::gpu::Backend* backend) {
  const char* check = "peer access";
  if (!backend || backend->kind() != ferry::gpu::BackendKind::kCuda)
    return test.skip(check, "needs CUDA devices (the device backend is " +
                                std::string(ferry::gpu::backend_kind_name(backend ? backend->kind()
                                                                                  : ferry::gpu::BackendKind::kNone)) +
                                ")");
  const int devices = backend->device_count();
  if (devices < 2) return test.skip(check, "one CUDA device: no pair to test");
  constexpr std::size_t kBytes = 64 << 20;
  constexpr int kRepeats = 5;
  std::vector<unsigned char> pattern(kBytes), back(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<unsigned char>(i * 13 + 5);
  for (int a = 0; a < devices; ++a) {
    for (int b = 0; b < devices; ++b) {
      if (a == b) continue;
      const std::string pair = std::to_string(a) + "->" + std::to_string(b);
      void *src = nullptr, *dst = nullptr;
      ferry::gpu::Stream stream = nullptr;
      ferry::gpu::Event start = nullptr, stop = nullptr;
      float ms = 0;
      bool good = ferry::ok(backend->set_device(b)) && ferry::ok(backend->device_alloc(kBytes, &dst)) &&
                  ferry::ok(backend->set_device(a)) && ferry::ok(backend->device_alloc(kBytes, &src)) &&
                  ferry::ok(backend->copy(src, pattern.data(), kBytes)) &&
                  ferry::ok(backend->stream_create(&stream)) && ferry::ok(backend->event_create(&start)) &&
                  ferry::ok(backend->event_create(&stop)) &&
                  ferry::ok(backend->copy_async(dst, src, kBytes, stream)) &&  // warm-up
                  ferry::ok(backend->event_record(start, stream));
      for (int i = 0; good && i < kRepeats; ++i) good = ferry::ok(backend->copy_async(dst, src, kBytes, stream));
      good = good && ferry::ok(backend->event_record(stop, stream)) && ferry::ok(backend->event_synchronize(stop)) &&
             ferry::ok(backend->event_elapsed_ms(start, stop, &ms)) &&
             ferry::ok(backend->copy(back.data(), dst, kBytes)) && back == pattern;
      if (stop) FERRY_LOG_IF_FAILED(backend->event_destroy(stop));
      if (start) FERRY_LOG_IF_FAILED(backend->event_destroy(start));
      if (stream) FERRY_LOG_IF_FAILED(backend->stream_destroy(stream));
      if (src) FERRY_LOG_IF_FAILED(backend->device_free(src));
      if (dst) FERRY_LOG_IF_FAILED(backend->device_free(dst));
      if (!good) {
        test.fail(check, pair + ": a 64 MiB copy between the devices failed or arrived wrong");
        continue;
      }
      const double gbps = ms > 0 ? kRepeats * static_cast<double>(kBytes) / (ms * 1e6) : 0;
      char detail[256];
      // The runtime's copy between devices, not the engine's mapped-peer
      // path: without peer access enabled it may go through host memory.
      std::snprintf(detail, sizeof(detail), "CUDA devices %s: 64 MiB runtime copies arrive intact, %.1f GB/s",
                    pair.c_str(), gbps);
      test.pass(check, detail);
    }
  }
}

// The driver's word on peer access between every pair of NVIDIA GPUs; a
// pair joined by NVLink (directly or through NVSwitch) must have it.
void check_nvml_peer_status(SelfTest& test) {
  const char* check = "NVML peer access";
  const ferry::NvmlScan nvml = ferry::scan_nvml();
  const std::size_t n = nvml.gpus.size();
  if (n < 2) return test.skip(check, "fewer than two NVIDIA GPUs");
  std::string without;
  int failures = 0;
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = 0; b < n; ++b) {
      if (a == b || nvml.p2p_read[a][b] == 0) continue;
      bool switched_a = false, switched_b = false;
      for (const auto& [target, to_switch] : nvml.gpus[a].nvlink_to_switch) switched_a = switched_a || to_switch;
      for (const auto& [target, to_switch] : nvml.gpus[b].nvlink_to_switch) switched_b = switched_b || to_switch;
      const bool nvlinked = nvml.gpus[a].nvlinks.count(nvml.gpus[b].busid) > 0 || (switched_a && switched_b);
      const std::string pair = nvml.gpus[a].busid + "->" + nvml.gpus[b].busid + " (" +
                               ferry::nvml_p2p_status_name(nvml.p2p_read[a][b]) + ")";
      if (nvlinked) {
        ++failures;
        test.fail(check, pair + " although NVLink joins them");
      } else {
        without += (without.empty() ? "" : ", ") + pair;
      }
    }
  }
  if (failures) return;
  test.pass(check, without.empty() ? "peer reads OK between all " + std::to_string(n * (n - 1)) + " ordered pairs"
                                   : "no NVLink pair lacks it; without peer access: " + without);
}

#ifdef FERRY_INFO_HAVE_PMIX
// One ordered pair's link as the receiving rank measured it.
struct LinkResult {
  std::int32_t destination;
  std::int32_t source;
  std::int32_t transport;  // 0 none, 1 p2p, 2 shm
  std::int32_t data_ok;
  double latency_us;  // one small copy from the source, completed
  double gbps;        // the best of several whole-buffer copies
};

std::uint8_t link_pattern(int rank, std::size_t i) { return static_cast<std::uint8_t>(rank * 97 + i * 13 + (i >> 12)); }

// The device a rank tests: its rank on the node, as the launcher tells it,
// modulo the devices (what applications usually pick), so two ranks on a
// two-GPU node test the link between the GPUs, not one GPU's memory.
int device_of_local_rank(ferry::gpu::Backend* backend, int rank) {
  int local = rank;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"}) {
    if (const char* value = std::getenv(name)) {
      local = std::atoi(value);
      break;
    }
  }
  const int devices = backend->device_count();
  return devices > 0 ? local % devices : 0;
}

// Under a PMIx launcher (mpirun -np N ferry-info --self-test): every rank
// pulls from every other over the transport the engine chose between them,
// one ordered pair at a time, checks the bytes, and rank 0 reports each link.
void check_links(SelfTest& test, ferry::gpu::Backend* backend) {
  const char* check = "links";
  if (!std::getenv("PMIX_RANK"))
    return test.skip(check, "not started by a PMIx launcher: run `mpirun -np N ferry-info --self-test` to test "
                            "the links between the ranks of a node");
  std::unique_ptr<ferry::Bootstrap> bootstrap;
  std::string why;
  if (!ok(ferry::make_pmix_bootstrap(&bootstrap, &why))) return test.fail(check, "PMIx bootstrap: " + why);
  const int n = bootstrap->size(), me = bootstrap->rank();
  if (n < 2) return test.skip(check, "one rank: nothing to link");
  if (!backend) return test.fail(check, "no device backend");
  std::unique_ptr<ferry::Communicator> comm;
  if (!ok(ferry::Communicator::create(std::move(bootstrap), &comm))) return test.fail(check, "engine set-up failed");

  const std::size_t bytes = backend->kind() == ferry::gpu::BackendKind::kCuda ? (256u << 20) : (16u << 20);
  std::vector<std::uint8_t> host(bytes);
  for (std::size_t i = 0; i < bytes; ++i) host[i] = link_pattern(me, i);
  void* mine = nullptr;
  void* landing = nullptr;
  ferry::gpu::Stream stream = nullptr;
  ferry::SharedSegments* shm = comm->shm();
  const std::size_t shm_bytes = shm ? std::min(bytes, shm->bytes()) : 0;
  const std::int32_t device = device_of_local_rank(backend, me);
  std::vector<std::int32_t> devices(n);
  // A failed exchange fails the check once every step has been taken, so
  // that no rank leaves the others waiting in a later one.
  bool exchanged = ok(comm->bootstrap().allgather(&device, devices.data(), sizeof(device)));
  std::int32_t ready = ok(backend->set_device(device)) && ok(backend->device_alloc(bytes, &mine)) &&
                       ok(backend->device_alloc(bytes, &landing)) &&
                       ok(backend->copy(mine, host.data(), bytes)) && ok(backend->stream_create(&stream));
  if (shm) std::memcpy(shm->segment(me), host.data(), shm_bytes);
  ferry::ExportedBuffer exported{};
  if (ready && comm->all_peers_mapped()) ready = ok(comm->peer_memory().export_buffer(mine, &exported));
  std::vector<ferry::ExportedBuffer> everyone(n);
  std::vector<std::int32_t> all_ready(n);
  exchanged = ok(comm->bootstrap().allgather(&exported, everyone.data(), sizeof(exported))) && exchanged;
  exchanged = ok(comm->bootstrap().allgather(&ready, all_ready.data(), sizeof(ready))) && exchanged;
  const bool usable =
      exchanged && std::all_of(all_ready.begin(), all_ready.end(), [](std::int32_t r) { return r != 0; });

  std::vector<LinkResult> results(static_cast<std::size_t>(n) * n);
  for (int destination = 0; destination < n; ++destination) {
    for (int source = 0; source < n; ++source) {
      if (source == destination) continue;
      exchanged = ok(comm->bootstrap().barrier()) && exchanged;  // one link at a time: nothing else on the wire
      if (me != destination || !usable) continue;
      LinkResult& r = results[static_cast<std::size_t>(destination) * n + source];
      r = LinkResult{destination, source, 0, 0, 0, 0};
      const void* from = nullptr;
      std::size_t length = bytes;
      if (comm->all_peers_mapped()) {
        void* mapped = nullptr;
        if (ok(comm->peer_memory().import_buffer(everyone[source], &mapped))) from = mapped;
        r.transport = 1;
      } else if (shm) {
        from = shm->segment(source);
        length = shm_bytes;
        r.transport = 2;
      }
      if (!from) continue;
      using Clock = std::chrono::steady_clock;
      std::vector<double> small;
      bool fine = true;
      for (int i = 0; i < 50 && fine; ++i) {
        const auto start = Clock::now();
        fine = ok(backend->copy_async(landing, from, 8, stream)) && ok(backend->stream_synchronize(stream));
        small.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
      double best = 1e30;
      for (int i = 0; i < 5 && fine; ++i) {
        const auto start = Clock::now();
        fine = ok(backend->copy_async(landing, from, length, stream)) && ok(backend->stream_synchronize(stream));
        best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
      }
      std::vector<std::uint8_t> got(length);
      fine = fine && ok(backend->copy(got.data(), landing, length));
      bool same = fine;
      for (std::size_t i = 0; same && i < length; ++i) same = got[i] == link_pattern(source, i);
      std::sort(small.begin(), small.end());
      r.data_ok = same;
      r.latency_us = small.empty() ? 0 : small[small.size() / 2];
      r.gbps = fine ? length / best / 1e9 : 0;
    }
  }
  std::vector<LinkResult> gathered(results.size() * n);
  exchanged = ok(comm->bootstrap().allgather(results.data(), gathered.data(), results.size() * sizeof(LinkResult))) &&
              exchanged;
  FERRY_LOG_IF_FAILED(backend->stream_destroy(stream));
  FERRY_LOG_IF_FAILED(backend->device_free(mine));
  FERRY_LOG_IF_FAILED(backend->device_free(landing));
  if (!exchanged) return test.fail(check, "the exchange between the ranks over the PMIx bootstrap failed");
  if (!usable) return test.fail(check, "a rank could not set up its test buffer");
  if (me != 0) return;
  for (int destination = 0; destination < n; ++destination)
    for (int source = 0; source < n; ++source) {
      if (source == destination) continue;
      const LinkResult& r = gathered[static_cast<std::size_t>(destination) * n * n + destination * n + source];
      const std::string pair = "rank " + std::to_string(source) + " (device " + std::to_string(devices[source]) +
                               ") -> rank " + std::to_string(destination) + " (device " +
                               std::to_string(devices[destination]) + ")";
      if (r.transport == 0) {
        test.fail(check, pair + ": no engine transport between them (device buffers would be staged)");
        continue;
      }
      char numbers[160];
      std::snprintf(numbers, sizeof(numbers), "%s, 8 B copy %.1f us, %.1f GB/s over %zu MiB", 
                    r.transport == 1 ? "p2p (peer memory mapped)" : "shm (host shared memory)", r.latency_us,
                    r.gbps, (r.transport == 1 ? bytes : shm_bytes) >> 20);
      if (r.data_ok)
        test.pass(check, pair + ": " + numbers);
      else
        test.fail(check, pair + ": the bytes that arrived are wrong (" + numbers + ")");
    }
}
#endif

int self_test() {
  SelfTest test;
  if (const char* rank = std::getenv("PMIX_RANK"); rank && std::strcmp(rank, "0") != 0) {
    test.quiet = true;
    test.prefix = std::string("rank ") + rank + ": ";
  }
  std::vector<std::string> problems = ferry::param_problems();
  std::vector<std::string> unknown_transports;
  ferry::allowed_transports(ferry::params().transports, false, false, &unknown_transports);
  for (const std::string& name : unknown_transports)
    problems.push_back("FERRY_TRANSPORTS names '" + name + "', not a transport (p2p, shm, net, none): ignored");
  if (problems.empty()) {
    test.pass("parameters", "every FERRY_* variable set is known and well formed");
  } else {
    for (const std::string& problem : problems) test.fail("parameters", problem);
  }
  // Before anything starts threads: the shared-memory check forks.
  check_shared_memory(test);

  // Discovery, whatever FERRY_TOPO_FILE says: this checks the machine.
  const ferry::LocalTopology discovered = ferry::load_local_topology("", "", 0);
  const ferry::DiscoveryReport& found = discovered.discovery;
  if (found.hwloc) {
    test.pass("hwloc", found.hwloc_note + ": " + std::to_string(found.numa_nodes) + " NUMA node(s), " +
                           std::to_string(found.pci_switches) + " PCI switch(es), " + std::to_string(found.gpus) +
                           " GPU(s), " + std::to_string(found.nics) + " NIC(s)");
  } else {
    test.fail("hwloc", found.hwloc_note);
  }
  if (found.nvml) {
    test.pass("NVML", found.nvml_note + ", " + std::to_string(found.nvlink_links) + " active NVLink link(s)");
    check_nvml_peer_status(test);
  } else if (found.nvidia_gpus > 0) {
    test.fail("NVML", found.nvml_note + ": NVIDIA GPUs are on the PCI bus, but their NVLink links are unknown");
  } else {
    test.skip("NVML", found.nvml_note);
  }
  if (found.amd_gpus == 0) {
    test.skip("rocm-smi", found.rocm_smi_note);
  } else if (!found.rocm_smi) {
    test.fail("rocm-smi", found.rocm_smi_note + ": AMD GPUs are on the PCI bus, but their xGMI links are unknown");
  } else if (found.rocm_smi_gpus < found.amd_gpus) {
    test.fail("rocm-smi", found.rocm_smi_note + ": it reports " + std::to_string(found.rocm_smi_gpus) + " of the " +
                              std::to_string(found.amd_gpus) + " AMD GPU(s) on the PCI bus; the others' xGMI links "
                              "are unknown");
  } else {
    test.pass("rocm-smi", found.rocm_smi_note + ", " + std::to_string(found.amd_gpus) + " AMD GPU(s), " +
                              std::to_string(found.xgmi_links) + " xGMI link(s)");
  }
  if (!ferry::params().topo_file.empty()) {
    const ferry::LocalTopology loaded = ferry::load_local_topology(ferry::params().topo_file, "", 0);
    if (loaded.available) {
      test.pass("FERRY_TOPO_FILE", ferry::params().topo_file + " loads");
    } else {
      test.fail("FERRY_TOPO_FILE", loaded.error);
    }
  }

  ferry::gpu::Backend* backend = ferry::gpu::active_backend();
  const ferry::gpu::BackendKind kind = backend ? backend->kind() : ferry::gpu::BackendKind::kNone;
  if (backend) {
    test.pass("device backend", std::string(ferry::gpu::backend_kind_name(kind)) + " (FERRY_DEVICE=" +
                                    ferry::params().device + ")");
  } else {
    test.fail("device backend", "FERRY_DEVICE=" + ferry::params().device + ": no usable device backend");
  }
  if (kind == ferry::gpu::BackendKind::kCuda) {
    test.pass("GPUs visible", std::to_string(backend->device_count()) + " CUDA device(s); hwloc sees " +
                                  std::to_string(found.gpus) + " GPU(s) on the PCI bus");
  } else if (found.gpus > 0) {
    test.fail("GPUs visible", "hwloc sees " + std::to_string(found.gpus) +
                                  " GPU(s) on the PCI bus, but Ferry does not use them (no CUDA backend in this "
                                  "build, no driver, or FERRY_DEVICE=emulated)");
  } else {
    test.skip("GPUs visible", "no GPU on the PCI bus; Ferry runs on the emulated device");
  }
  check_device_memory(test, backend);
  check_peer_access(test, backend);
#ifdef FERRY_INFO_HAVE_PMIX
  check_links(test, backend);
#endif
  if (test.quiet) return test.failed ? 1 : 0;

  std::printf("self-test: %d passed, %d skipped, %d failed\n", test.passed, test.skipped, test.failed);
  return test.failed ? 1 : 0;
}

// ---- model ---------------------------------------------------------------

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
  std::printf("\ntime of one blocking call in us; busbw in GB/s = 2(n-1)/n * bytes / time (nccl-tests);\n"
              "direct algorithms only where every peer is mapped; pick = the runtime's choice (not in place)\n\n");
  std::printf("%8s %6s %11s %9s %11s %9s %11s %11s %11s %11s %11s %11s  %-7s %s\n", "bytes", "ranks", "ring us",
              "busbw", "tree us", "busbw", "ll us", "ll128 us", "oneshot us", "twoshot us", "copyeng us", "cepush us",
              "faster", "pick");
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
      const bool direct = ferry::algorithm_applies(AllreduceAlgorithm::kOneShot, n, machine);
      std::printf("%8s %6d %11.1f %9.2f %11.1f %9.2f %11s %11s %11s %11s %11s %11s  %-7s %s\n", size_name(bytes).c_str(), n,
                  ring, ferry::allreduce_busbw_gbps(bytes, n, ring), tree, ferry::allreduce_busbw_gbps(bytes, n, tree),
                  cell(AllreduceAlgorithm::kOneShotLl, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kOneShotLl128, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kOneShot, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kTwoShot, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kCopyEngine, bytes, n).c_str(),
                  cell(AllreduceAlgorithm::kCopyPush, bytes, n).c_str(), ring < tree ? "ring" : "tree",
                  direct ? ferry::algorithm_info(ferry::model_allreduce(n, bytes, false, machine)).name : "-");
    }
    std::printf("\n");
  }
  return 0;
}

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

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: ferry-info [OPTION]\n"
               "What Ferry sees on this machine and how it is configured.\n\n"
               "  (no option)           version, device backend, devices, parameters in effect\n"
               "  --markdown            the parameter table as Markdown (the README's)\n"
               "  --topo FILE...        what Ferry makes of NCCL-style topology XML, one file a host\n"
               "  --discover [--ranks N]  the topology the engine would use here, and its search\n"
               "                        over N ranks of this machine\n"
               "  --self-test           checks for debugging a cluster, one PASS/FAIL/SKIP line each\n"
               "                        (under mpirun -np N: across the ranks); exit 1 on a failure\n"
               "  --model [--bytes 8,1M,256M] [--machine nvlink|pcie|multinode]\n"
               "                        the tuner's predicted allreduce time and bus bandwidth\n"
               "  --version             Ferry's version\n"
               "  --help                this text\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if ((mode == "--help" || mode == "-h") && argc == 2) {
    print_usage(stdout);
    return 0;
  }
  if ((mode == "--version" || mode == "-V") && argc == 2) {
    std::printf("ferry-info (Ferry) %d.%d.%d\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH);
    return 0;
  }
  if (mode == "--markdown" && argc == 2) {
    print_markdown_table();
    return 0;
  }
  if (mode == "--topo" && argc > 2) return print_topology(argc - 2, argv + 2);
  if ((mode == "--topo" || mode == "--discover") &&
      (argc == 2 || (argc == 4 && std::strcmp(argv[2], "--ranks") == 0 && std::atoi(argv[3]) > 0)))
    return print_local_topology(argc == 4 ? std::atoi(argv[3]) : 0);
  if (mode == "--self-test" && argc == 2) return self_test();
  if (mode == "--model") {
    const int rc = model_command(argc - 2, argv + 2);
    if (rc >= 0) return rc;
  }
  if (argc > 1) {
    std::fprintf(stderr, "ferry-info: unknown option %s\n", argv[1]);
    print_usage(stderr);
    return 2;
  }
  print_report();
  return 0;
}
