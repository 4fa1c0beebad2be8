// ferry-info --self-test: the checks a user debugging a cluster wants, one
// PASS/FAIL/SKIP line each: parameters, shared memory, topology discovery,
// device backend, device memory, copies between devices, and under a PMIx
// launcher the links between the ranks (ferry_info_links.cc).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/collectives/communicator.h"
#include "engine/common/params.h"
#include "engine/gpu/gpu.h"
#include "engine/topology/discovery.h"
#include "engine/topology/local_topology.h"
#include "engine/topology/nvml.h"
#include "tools/ferry_info.h"
#include "tools/ferry_info_self_test.h"

namespace ferry_info {
namespace {

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
  if (!backend || !backend->physical_devices())
    return test.skip(check, "needs GPUs (the device backend is " +
                                std::string(ferry::gpu::backend_kind_name(backend ? backend->kind()
                                                                                  : ferry::gpu::BackendKind::kNone)) +
                                ")");
  const int devices = backend->device_count();
  if (devices < 2) return test.skip(check, "one GPU: no pair to test");
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

}  // namespace

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
  if (backend && backend->physical_devices()) {
    test.pass("GPUs visible", std::to_string(backend->device_count()) + " " + ferry::gpu::backend_kind_name(kind) +
                                  " device(s); hwloc sees " + std::to_string(found.gpus) + " GPU(s) on the PCI bus");
  } else if (found.gpus > 0) {
    test.fail("GPUs visible", "hwloc sees " + std::to_string(found.gpus) +
                                  " GPU(s) on the PCI bus, but Ferry does not use them (no GPU backend in this "
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

}  // namespace ferry_info
