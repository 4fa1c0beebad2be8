#include "engine/topology/nvml.h"

#include <dlfcn.h>

#include <cstdio>

#include "engine/common/log.h"

namespace ferry {
namespace {

// The few NVML declarations used here (nvml.h is not needed to build).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kP2pCapsRead = 0;     // NVML_P2P_CAPS_INDEX_READ
constexpr int kP2pStatusUnknown = 6;  // NVML_P2P_STATUS_UNKNOWN
constexpr int kRemoteGpu = 0, kRemoteSwitch = 2;  // nvmlIntNvLinkDeviceType_t
// NVML 12 has at most 18 links per GPU; asking beyond the last one fails
// harmlessly, so a later part with more links is still read in full.
constexpr unsigned kMaxLinks = 32;

// nvmlPciInfo_t: every version starts with a 16-byte legacy bus id string
// followed by domain, bus and device; later versions append fields, so a
// generous buffer serves all of them.
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char tail[128];
};

struct NvmlApi {
  void* library = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*driver_version)(char*, unsigned) = nullptr;
  NvmlReturn (*device_count)(unsigned*) = nullptr;
  NvmlReturn (*handle_by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*pci_info)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlReturn (*compute_capability)(NvmlDevice, int*, int*) = nullptr;
  NvmlReturn (*nvlink_state)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*nvlink_remote_pci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  NvmlReturn (*nvlink_remote_type)(NvmlDevice, unsigned, int*) = nullptr;  // optional (NVML 11+)
  NvmlReturn (*p2p_status)(NvmlDevice, NvmlDevice, int, int*) = nullptr;
};

template <typename Function>
bool resolve(void* library, Function* function, const char* name, const char* fallback = nullptr) {
  void* symbol = dlsym(library, name);
  if (!symbol && fallback) symbol = dlsym(library, fallback);
  *function = reinterpret_cast<Function>(symbol);
  return symbol != nullptr;
}

// Opens NVML; on failure says why in note and returns false.
bool open_nvml(NvmlApi& api, std::string& note) {
  api.library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api.library) {
    const char* why = dlerror();
    note = std::string("libnvidia-ml.so.1 not found (") + (why ? why : "no NVIDIA driver") + ")";
    return false;
  }
  const bool complete =
      resolve(api.library, &api.init, "nvmlInit_v2", "nvmlInit") &&
      resolve(api.library, &api.shutdown, "nvmlShutdown") &&
      resolve(api.library, &api.error_string, "nvmlErrorString") &&
      resolve(api.library, &api.driver_version, "nvmlSystemGetDriverVersion") &&
      resolve(api.library, &api.device_count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount") &&
      resolve(api.library, &api.handle_by_index, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex") &&
      resolve(api.library, &api.pci_info, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo") &&
      resolve(api.library, &api.compute_capability, "nvmlDeviceGetCudaComputeCapability") &&
      resolve(api.library, &api.nvlink_state, "nvmlDeviceGetNvLinkState") &&
      resolve(api.library, &api.nvlink_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2",
              "nvmlDeviceGetNvLinkRemotePciInfo") &&
      resolve(api.library, &api.p2p_status, "nvmlDeviceGetP2PStatus");
  resolve(api.library, &api.nvlink_remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (!complete) {
    note = "libnvidia-ml.so.1 lacks functions Ferry needs (driver too old)";
    dlclose(api.library);
    return false;
  }
  const NvmlReturn status = api.init();
  if (status != kNvmlSuccess) {
    note = std::string("nvmlInit failed: ") + api.error_string(status);
    dlclose(api.library);
    return false;
  }
  return true;
}

// The XML's form of a bus id from NVML's numeric fields (function 0: NVML
// reports GPUs and switches, which are function 0).
std::string busid_of(const NvmlPciInfo& pci) {
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.0", pci.domain & 0xffff, pci.bus & 0xff, pci.device & 0x1f);
  return text;
}

}  // namespace

NvmlScan scan_nvml() {
  NvmlScan scan;
  NvmlApi api;
  if (!open_nvml(api, scan.note)) {
    FERRY_INFO(Topo, "NVML: %s; no NVLink links in the topology", scan.note.c_str());
    return scan;
  }
  scan.loaded = true;
  char version[80] = "";
  api.driver_version(version, sizeof(version));
  scan.note = std::string("driver ") + version;

  unsigned count = 0;
  if (api.device_count(&count) != kNvmlSuccess) count = 0;
  std::vector<NvmlDevice> handles;
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice handle = nullptr;
    NvmlPciInfo pci{};
    if (api.handle_by_index(i, &handle) != kNvmlSuccess || api.pci_info(handle, &pci) != kNvmlSuccess) {
      FERRY_WARN(Topo, "NVML: cannot read device %u; it is left out of the topology", i);
      continue;
    }
    NvmlGpu gpu;
    gpu.index = static_cast<int>(i);
    gpu.busid = busid_of(pci);
    int major = 0, minor = 0;
    if (api.compute_capability(handle, &major, &minor) == kNvmlSuccess) gpu.sm = major * 10 + minor;
    for (unsigned link = 0; link < kMaxLinks; ++link) {
      int active = 0;
      NvmlPciInfo remote{};
      if (api.nvlink_state(handle, link, &active) != kNvmlSuccess || !active ||
          api.nvlink_remote_pci(handle, link, &remote) != kNvmlSuccess)
        continue;
      int remote_type = -1;
      if (api.nvlink_remote_type && api.nvlink_remote_type(handle, link, &remote_type) != kNvmlSuccess)
        remote_type = -1;
      // NVLink to a CPU (IBM NPU, Grace C2C) is not a path between GPUs.
      if (remote_type >= 0 && remote_type != kRemoteGpu && remote_type != kRemoteSwitch) continue;
      const std::string target = busid_of(remote);
      ++gpu.nvlinks[target];
      gpu.nvlink_to_switch[target] = remote_type == kRemoteSwitch;
    }
    handles.push_back(handle);
    scan.gpus.push_back(std::move(gpu));
  }
  // Without the remote type, a far end that is not one of the GPUs is a switch.
  if (!api.nvlink_remote_type) {
    for (NvmlGpu& gpu : scan.gpus) {
      for (auto& [target, to_switch] : gpu.nvlink_to_switch) {
        to_switch = true;
        for (const NvmlGpu& other : scan.gpus) to_switch = to_switch && other.busid != target;
      }
    }
  }

  const std::size_t n = handles.size();
  scan.p2p_read.assign(n, std::vector<int>(n, 0));
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = 0; b < n; ++b)
      if (a != b && api.p2p_status(handles[a], handles[b], kP2pCapsRead, &scan.p2p_read[a][b]) != kNvmlSuccess)
        scan.p2p_read[a][b] = kP2pStatusUnknown;

  api.shutdown();
  dlclose(api.library);
  FERRY_INFO(Topo, "NVML (%s): %zu GPU(s)", scan.note.c_str(), scan.gpus.size());
  return scan;
}

const char* nvml_p2p_status_name(int status) {
  static const char* const kNames[] = {"OK", "chipset not supported", "GPU not supported",
                                       "IOH topology not supported", "disabled by regkey", "not supported",
                                       "unknown"};
  return status >= 0 && status <= kP2pStatusUnknown ? kNames[status] : "unknown";
}

}  // namespace ferry
