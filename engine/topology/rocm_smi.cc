#include "engine/topology/rocm_smi.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <map>

#include "engine/common/log.h"

namespace ferry {
namespace {

// The few declarations of ROCm SMI's include/rocm_smi/rocm_smi.h
// (ROCm/rocm_smi_lib) used here, with the values relied on; the header is
// not needed to build. Its enums hold 0xFFFFFFFF, so they are 32-bit
// unsigned.
using RsmiStatus = std::uint32_t;      // rsmi_status_t
using RsmiIoLinkType = std::uint32_t;  // RSMI_IO_LINK_TYPE
constexpr RsmiStatus kRsmiSuccess = 0;                 // RSMI_STATUS_SUCCESS
constexpr RsmiIoLinkType kRsmiPcie = 1, kRsmiXgmi = 2;  // RSMI_IOLINK_TYPE_PCIEXPRESS, RSMI_IOLINK_TYPE_XGMI
constexpr std::uint64_t kRsmiInitAmdGpus = 0;  // rsmi_init flags: AMD devices only (no RSMI_INIT_FLAG_ALL_GPUS)
static_assert(static_cast<RsmiIoLinkType>(RocmSmiLinkType::kPcie) == kRsmiPcie &&
                  static_cast<RsmiIoLinkType>(RocmSmiLinkType::kXgmi) == kRsmiXgmi,
              "RocmSmiLinkType holds RSMI_IO_LINK_TYPE's values");

// rsmi_version_t: major, minor, patch, build string; room to spare in case
// a version appends fields.
struct RsmiVersion {
  std::uint32_t major, minor, patch;
  const char* build;
  char tail[64];
};

struct RsmiApi {
  void* library = nullptr;
  RsmiStatus (*init)(std::uint64_t) = nullptr;
  RsmiStatus (*shut_down)() = nullptr;
  RsmiStatus (*device_count)(std::uint32_t*) = nullptr;            // rsmi_num_monitor_devices
  RsmiStatus (*pci_id)(std::uint32_t, std::uint64_t*) = nullptr;   // rsmi_dev_pci_id_get
  RsmiStatus (*link_type)(std::uint32_t, std::uint32_t, std::uint64_t*, RsmiIoLinkType*) = nullptr;
  // Optional: answers without them are only less detailed.
  RsmiStatus (*status_string)(RsmiStatus, const char**) = nullptr;
  RsmiStatus (*version)(RsmiVersion*) = nullptr;
  RsmiStatus (*name)(std::uint32_t, char*, std::size_t) = nullptr;  // rsmi_dev_name_get
  RsmiStatus (*link_weight)(std::uint32_t, std::uint32_t, std::uint64_t*) = nullptr;
  RsmiStatus (*bandwidth)(std::uint32_t, std::uint32_t, std::uint64_t*, std::uint64_t*) = nullptr;  // min, max
};

template <typename Function>
bool resolve(void* library, Function* function, const char* name) {
  void* symbol = dlsym(library, name);
  *function = reinterpret_cast<Function>(symbol);
  return symbol != nullptr;
}

// The path the dynamic linker opened for handle, else name.
std::string path_of(void* handle, const std::string& name) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return name;
}

// A copy this process already holds first, then the names in order.
void* open_library(const std::vector<std::string>& names, std::string& opened) {
  for (int flags : {RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD, RTLD_NOW | RTLD_LOCAL})
    for (const std::string& name : names)
      if (void* handle = dlopen(name.c_str(), flags)) {
        opened = path_of(handle, name);
        return handle;
      }
  return nullptr;
}

std::string status_text(const RsmiApi& api, RsmiStatus status) {
  const char* text = nullptr;
  if (api.status_string && api.status_string(status, &text) != kRsmiSuccess) text = nullptr;
  return (text ? std::string(text) + " " : std::string()) + "(status " + std::to_string(status) + ")";
}

// Opens and initialises ROCm SMI; on failure says why in scan.note and
// returns false with nothing left open.
bool open_rocm_smi(const std::vector<std::string>& names, RsmiApi& api, RocmSmiScan& scan) {
  api.library = open_library(names, scan.library);
  if (!api.library) {
    std::string tried;
    for (const std::string& name : names) tried += (tried.empty() ? "" : ", ") + name;
    scan.note = "librocm_smi64 not found (tried " + tried + ")";
    return false;
  }
  const bool complete = resolve(api.library, &api.init, "rsmi_init") &&
                        resolve(api.library, &api.shut_down, "rsmi_shut_down") &&
                        resolve(api.library, &api.device_count, "rsmi_num_monitor_devices") &&
                        resolve(api.library, &api.pci_id, "rsmi_dev_pci_id_get") &&
                        resolve(api.library, &api.link_type, "rsmi_topo_get_link_type");
  resolve(api.library, &api.status_string, "rsmi_status_string");
  resolve(api.library, &api.version, "rsmi_version_get");
  resolve(api.library, &api.name, "rsmi_dev_name_get");
  resolve(api.library, &api.link_weight, "rsmi_topo_get_link_weight");
  resolve(api.library, &api.bandwidth, "rsmi_minmax_bandwidth_get");
  if (!complete) {
    scan.note = scan.library + " lacks functions Ferry needs (ROCm SMI too old)";
    dlclose(api.library);
    return false;
  }
  // Without the amdgpu driver (no /sys/class/drm, or no AMD GPU) this fails;
  // the library writes its own complaint to stderr.
  const RsmiStatus status = api.init(kRsmiInitAmdGpus);
  if (status != kRsmiSuccess) {
    scan.note = scan.library + ": rsmi_init failed: " + status_text(api, status);
    dlclose(api.library);
    return false;
  }
  return true;
}

RocmSmiLink read_link(const RsmiApi& api, std::uint32_t a, std::uint32_t b) {
  RocmSmiLink link;
  std::uint64_t hops = 0;
  RsmiIoLinkType type = 0;
  if (api.link_type(a, b, &hops, &type) != kRsmiSuccess) return link;
  link.known = true;
  link.hops = hops;
  link.type = type == kRsmiPcie || type == kRsmiXgmi ? static_cast<RocmSmiLinkType>(type) : RocmSmiLinkType::kUndefined;
  if (api.link_weight && api.link_weight(a, b, &link.weight) != kRsmiSuccess) link.weight = 0;
  // ROCm SMI answers the bandwidth for xGMI pairs one hop apart only.
  if (api.bandwidth && link.type == RocmSmiLinkType::kXgmi && hops == 1 &&
      api.bandwidth(a, b, &link.min_mbps, &link.max_mbps) != kRsmiSuccess)
    link.min_mbps = link.max_mbps = 0;
  return link;
}

}  // namespace

const std::vector<std::string>& rocm_smi_library_names() {
  static const std::vector<std::string> kNames = {"/opt/rocm/lib/librocm_smi64.so", "librocm_smi64.so",
                                                  "librocm_smi64.so.1", "/opt/rocm/lib/librocm_smi64.so.1"};
  return kNames;
}

RocmSmiScan scan_rocm_smi(const std::vector<std::string>& names) {
  RocmSmiScan scan;
  RsmiApi api;
  if (!open_rocm_smi(names, api, scan)) {
    FERRY_INFO(Topo, "rocm-smi: %s; no xGMI links in the topology", scan.note.c_str());
    return scan;
  }
  scan.loaded = true;
  RsmiVersion version{};
  scan.note = scan.library;
  if (api.version && api.version(&version) == kRsmiSuccess)
    scan.note = "ROCm SMI " + std::to_string(version.major) + "." + std::to_string(version.minor) + "." +
                std::to_string(version.patch) + " (" + scan.library + ")";

  std::uint32_t count = 0;
  if (api.device_count(&count) != kRsmiSuccess) count = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint64_t bdfid = 0;
    if (api.pci_id(i, &bdfid) != kRsmiSuccess) {
      FERRY_WARN(Topo, "rocm-smi: cannot read the bus id of device %u; it is left out of the topology", i);
      continue;
    }
    RocmSmiGpu gpu;
    gpu.index = static_cast<int>(i);
    gpu.busid = rocm_smi_busid(bdfid);
    char name[256] = "";
    if (api.name && api.name(i, name, sizeof(name)) == kRsmiSuccess) gpu.name = name;
    scan.gpus.push_back(std::move(gpu));
  }
  const std::size_t n = scan.gpus.size();
  scan.links.assign(n, std::vector<RocmSmiLink>(n));
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = 0; b < n; ++b)
      if (a != b)
        scan.links[a][b] = read_link(api, static_cast<std::uint32_t>(scan.gpus[a].index),
                                     static_cast<std::uint32_t>(scan.gpus[b].index));

  if (scan.gpus.empty()) scan.note += ": no GPU reported";
  api.shut_down();
  dlclose(api.library);
  FERRY_INFO(Topo, "rocm-smi (%s): %zu GPU(s)", scan.note.c_str(), scan.gpus.size());
  return scan;
}

std::string rocm_smi_busid(std::uint64_t bdfid) {
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.0", static_cast<unsigned>(bdfid >> 32),
                static_cast<unsigned>(bdfid >> 8) & 0xffu, static_cast<unsigned>(bdfid >> 3) & 0x1fu);
  return text;
}

std::vector<XgmiLink> xgmi_links_of(const RocmSmiScan& scan, const std::string& busid) {
  // The first device of each bus id stands for the GPU.
  std::map<std::string, std::size_t> first;
  for (std::size_t i = 0; i < scan.gpus.size(); ++i) first.emplace(scan.gpus[i].busid, i);
  const auto from = first.find(busid);
  std::vector<XgmiLink> out;
  if (from == first.end() || from->second >= scan.links.size()) return out;
  const std::vector<RocmSmiLink>& row = scan.links[from->second];
  for (const auto& [target, to] : first) {
    if (to == from->second || to >= row.size()) continue;
    const RocmSmiLink& link = row[to];
    if (!link.known || link.type != RocmSmiLinkType::kXgmi || link.hops != 1) continue;
    XgmiLink xgmi{target, 1};
    if (link.min_mbps > 0 && link.max_mbps >= link.min_mbps)
      xgmi.count = static_cast<int>(link.max_mbps / link.min_mbps);
    out.push_back(xgmi);
  }
  return out;
}

const char* rocm_smi_link_type_name(RocmSmiLinkType type) {
  switch (type) {
    case RocmSmiLinkType::kPcie: return "PCIe";
    case RocmSmiLinkType::kXgmi: return "xGMI";
    default: return "undefined";
  }
}

std::string describe_rocm_smi(const RocmSmiScan& scan) {
  std::string out;
  for (const RocmSmiGpu& gpu : scan.gpus)
    out += "  rocm-smi GPU " + std::to_string(gpu.index) + ": " + gpu.busid + (gpu.name.empty() ? "" : ", ") +
           gpu.name + "\n";
  for (std::size_t a = 0; a < scan.gpus.size() && a < scan.links.size(); ++a)
    for (std::size_t b = a + 1; b < scan.gpus.size() && b < scan.links[a].size(); ++b) {
      const RocmSmiLink& link = scan.links[a][b];
      out += "  rocm-smi " + std::to_string(scan.gpus[a].index) + "-" + std::to_string(scan.gpus[b].index) + ": ";
      if (!link.known) {
        out += "link not known\n";
        continue;
      }
      out += std::string(rocm_smi_link_type_name(link.type)) + ", " + std::to_string(link.hops) + " hop(s)";
      if (link.weight > 0) out += ", weight " + std::to_string(link.weight);
      if (link.max_mbps > 0)
        out += ", " + std::to_string(link.min_mbps) + "-" + std::to_string(link.max_mbps) + " MB/s";
      out += "\n";
    }
  return out;
}

}  // namespace ferry
