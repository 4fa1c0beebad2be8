#include "engine/topology/discovery.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/topology/nvml.h"
#include "engine/topology/rocm_smi.h"
#include "engine/topology/topology_xml.h"

#ifdef FERRY_HAVE_HWLOC
#include <hwloc.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#endif

namespace ferry {
namespace {

constexpr const char* kEmulatedBusPrefix = "emulated:";

std::string attr(const char* key, const std::string& value) {
  return " " + std::string(key) + "=\"" + xml_escape(value) + "\"";
}

}  // namespace

bool is_emulated_gpu(const Node& node) {
  return node.type == NodeType::kGpu && node.busid.rfind(kEmulatedBusPrefix, 0) == 0;
}

std::string xgmi_elements(const RocmSmiScan& scan, const std::string& busid,
                          const std::map<std::string, std::string>& gpus, int depth, int* links) {
  const std::string pad(2 * depth, ' ');
  std::string out;
  for (const XgmiLink& link : xgmi_links_of(scan, busid)) {
    const auto target = gpus.find(link.target);
    if (target == gpus.end()) continue;
    out += pad + "<xgmi" + attr("target", link.target) + attr("count", std::to_string(link.count)) +
           attr("tclass", target->second) + "/>\n";
    if (links) *links += link.count;
  }
  return out;
}

#ifdef FERRY_HAVE_HWLOC
namespace {

constexpr unsigned kVendorNvidia = 0x10de, kVendorAmd = 0x1002;
constexpr unsigned kClassVga = 0x0300, kClass3d = 0x0302;
// AMD's Instinct parts: MI100 and MI200 are "display controllers" (0x0380),
// MI300 "processing accelerators" (0x1200).
constexpr unsigned kClassDisplayOther = 0x0380, kClassAccelerator = 0x1200;
constexpr const char* kNvSwitchClass = "0x068000";
// Mb/s NCCL assumes for an interface that does not report its speed.
constexpr int kDefaultNetSpeedMbps = 10000;

std::string read_line(const std::string& path) {
  std::string line;
  std::ifstream file(path);
  std::getline(file, line);
  return line;
}

bool path_exists(const char* path) {
  struct stat info;
  return stat(path, &info) == 0;
}

// GPUDirect RDMA needs the peer-memory module between NIC and GPU driver.
bool gpudirect_rdma_module_loaded() {
  return path_exists("/sys/module/nvidia_peermem") || path_exists("/sys/module/nv_peer_mem");
}

std::string busid_of(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", static_cast<unsigned>(pci.domain), pci.bus, pci.dev,
                pci.func);
  return text;
}

// sysfs's cpumap form, as in NCCL's files: 32-bit hex words, most
// significant first, separated by commas.
std::string affinity_of(hwloc_const_cpuset_t cpuset) {
  const int last = hwloc_bitmap_last(cpuset);
  const int words = last < 0 ? 1 : last / 32 + 1;
  std::string out;
  for (int w = words - 1; w >= 0; --w) {
    const unsigned long bits = hwloc_bitmap_to_ith_ulong(cpuset, static_cast<unsigned>(w / (sizeof(long) * 8 / 32)));
    const unsigned word = static_cast<unsigned>(bits >> (32 * (w % (sizeof(long) * 8 / 32)))) & 0xffffffffu;
    char text[16];
    std::snprintf(text, sizeof(text), "%08x", word);
    if (!out.empty()) out += ",";
    out += text;
  }
  return out;
}

// sysfs's class of a PCI device ("0x030200"), else hwloc's with no
// programming interface.
std::string pci_class_of(const std::string& busid, unsigned class_id) {
  std::string pci_class = read_line("/sys/bus/pci/devices/" + busid + "/class");
  if (pci_class.empty()) {
    char text[16];
    std::snprintf(text, sizeof(text), "0x%04x00", class_id);
    pci_class = text;
  }
  return pci_class;
}

// The PCI attributes every <pci> element carries; speed and width from
// sysfs as NCCL reads them, left out where the device does not say.
std::string pci_attributes(const std::string& busid, unsigned class_id) {
  const std::string dir = "/sys/bus/pci/devices/" + busid + "/";
  std::string out = attr("busid", busid) + attr("class", pci_class_of(busid, class_id));
  const std::string speed = read_line(dir + "max_link_speed");
  if (!speed.empty() && speed[0] >= '0' && speed[0] <= '9') out += attr("link_speed", speed);
  const std::string width = read_line(dir + "max_link_width");
  if (!width.empty() && width[0] >= '0' && width[0] <= '9') out += attr("link_width", width);
  return out;
}

// Network speed in Mb/s: a verbs port's rate ("200 Gb/sec (4X HDR)"), an
// interface's speed, or NCCL's default where neither says.
int net_speed_mbps(const std::string& name, bool openfabrics) {
  if (openfabrics) {
    const std::string rate = read_line("/sys/class/infiniband/" + name + "/ports/1/rate");
    const double gbits = std::strtod(rate.c_str(), nullptr);
    if (gbits > 0) return static_cast<int>(gbits * 1000);
  } else {
    const int mbps = std::atoi(read_line("/sys/class/net/" + name + "/speed").c_str());
    if (mbps > 0) return mbps;
  }
  return kDefaultNetSpeedMbps;
}

bool is_gpu(hwloc_obj_t obj) {
  if (obj->type != HWLOC_OBJ_PCI_DEVICE) return false;
  const auto& pci = obj->attr->pcidev;
  const bool display = pci.class_id == kClassVga || pci.class_id == kClass3d;
  if (pci.vendor_id == kVendorNvidia) return display;
  return pci.vendor_id == kVendorAmd &&
         (display || pci.class_id == kClassDisplayOther || pci.class_id == kClassAccelerator);
}

class HwlocWriter {
 public:
  HwlocWriter(hwloc_topology_t topology, const NvmlScan& nvml, const RocmSmiScan& rocm_smi, int emulated_devices,
              DiscoveryReport& report)
      : topology_(topology),
        nvml_(nvml),
        rocm_smi_(rocm_smi),
        emulated_devices_(emulated_devices),
        report_(report),
        gdr_(gpudirect_rdma_module_loaded()) {}

  std::string write() {
    struct utsname machine;
    const std::string arch = uname(&machine) == 0 ? machine.machine : "";
    hwloc_obj_t package = hwloc_get_obj_by_type(topology_, HWLOC_OBJ_PACKAGE, 0);
    const char* vendor = package ? hwloc_obj_get_info_by_name(package, "CPUVendor") : nullptr;

    // One <cpu> per NUMA node that has CPUs (memory-only nodes hold no PCI roots NCCL would use).
    std::vector<hwloc_obj_t> numa;
    for (hwloc_obj_t node = nullptr; (node = hwloc_get_next_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, node));)
      if (node->cpuset && !hwloc_bitmap_iszero(node->cpuset)) numa.push_back(node);
    number_gpus();

    std::string body;
    for (std::size_t i = 0; i < numa.size() || (i == 0 && numa.empty()); ++i) {
      hwloc_const_cpuset_t cpuset = numa.empty() ? hwloc_topology_get_topology_cpuset(topology_) : numa[i]->cpuset;
      body += "  <cpu" + attr("numaid", std::to_string(numa.empty() ? 0 : numa[i]->os_index)) +
              attr("affinity", affinity_of(cpuset)) + (arch.empty() ? "" : attr("arch", arch)) +
              (vendor ? attr("vendor", vendor) : "") + ">\n";
      for (hwloc_obj_t root : pci_roots())
        if (numa_index_of(root, numa) == i) body += write_io(root, 2);
      // Emulated device memory is host memory on whichever node first
      // touches it; the first stands for all of them.
      if (i == 0) body += write_emulated_gpus(2);
      body += "  </cpu>\n";
      ++report_.numa_nodes;
    }
    return "<system version=\"1\">\n" + body + "</system>\n";
  }

 private:
  // Without NVML, GPUs are numbered in bus order.
  void number_gpus() {
    int ordinal = 0;
    for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_pcidev(topology_, obj));) {
      if (!is_gpu(obj)) continue;
      const std::string busid = busid_of(obj->attr->pcidev);
      gpu_busids_.push_back({busid, ordinal++});
      gpu_classes_[busid] = pci_class_of(busid, obj->attr->pcidev.class_id);
    }
  }

  const NvmlGpu* nvml_gpu(const std::string& busid) const {
    for (const NvmlGpu& gpu : nvml_.gpus)
      if (gpu.busid == busid) return &gpu;
    return nullptr;
  }

  bool is_discovered_gpu(const std::string& busid) const {
    for (const auto& [id, ordinal] : gpu_busids_)
      if (id == busid) return true;
    return false;
  }

  // The tops of the PCI trees: I/O objects whose parent is on the CPU side
  // (host bridges among them; write_io looks through those).
  std::vector<hwloc_obj_t> pci_roots() const {
    std::vector<hwloc_obj_t> roots;
    auto is_io = [](hwloc_obj_t obj) { return obj->type == HWLOC_OBJ_BRIDGE || obj->type == HWLOC_OBJ_PCI_DEVICE; };
    for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_bridge(topology_, obj));)
      if (!obj->parent || !is_io(obj->parent)) roots.push_back(obj);
    for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_pcidev(topology_, obj));)
      if (!obj->parent || !is_io(obj->parent)) roots.push_back(obj);
    return roots;
  }

  // The <cpu> a PCI tree hangs off: the NUMA node of its nearest CPU-side ancestor.
  std::size_t numa_index_of(hwloc_obj_t io, const std::vector<hwloc_obj_t>& numa) const {
    hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topology_, io);
    for (std::size_t i = 0; ancestor && i < numa.size(); ++i)
      if (hwloc_bitmap_intersects(ancestor->cpuset, numa[i]->cpuset)) return i;
    return 0;
  }

  // A bridge with nothing Ferry uses below it is left out, as are PCI
  // devices that are neither GPU nor NIC.
  std::string write_io(hwloc_obj_t obj, int depth) {
    const std::string pad(2 * depth, ' ');
    if (obj->type == HWLOC_OBJ_BRIDGE) {
      std::string inner;
      for (hwloc_obj_t child = obj->io_first_child; child; child = child->next_sibling)
        inner += write_io(child, depth + 1);
      if (inner.empty() || obj->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI) return inner;
      ++report_.pci_switches;
      const auto& pci = obj->attr->bridge.upstream.pci;
      return pad + "<pci" + pci_attributes(busid_of(pci), pci.class_id) + ">\n" + inner + pad + "</pci>\n";
    }
    if (obj->type != HWLOC_OBJ_PCI_DEVICE) return "";
    const std::string busid = busid_of(obj->attr->pcidev);
    const std::string open = pad + "<pci" + pci_attributes(busid, obj->attr->pcidev.class_id) + ">\n";
    if (is_gpu(obj)) return open + write_gpu(obj, busid, depth + 1) + pad + "</pci>\n";
    const std::string nets = write_nets(obj, depth + 2);
    if (nets.empty()) return "";
    ++report_.nics;
    return open + pad + "  <nic>\n" + nets + pad + "  </nic>\n" + pad + "</pci>\n";
  }

  std::string write_gpu(hwloc_obj_t obj, const std::string& busid, int depth) {
    ++report_.gpus;
    const std::string pad(2 * depth, ' ');
    const NvmlGpu* nvml = nvml_gpu(busid);
    int dev = 0;
    for (const auto& [id, ordinal] : gpu_busids_)
      if (id == busid) dev = ordinal;
    if (nvml) dev = nvml->index;
    const bool gdr = gdr_ && obj->attr->pcidev.vendor_id == kVendorNvidia;
    std::string out = pad + "<gpu" + attr("dev", std::to_string(dev)) + attr("sm", std::to_string(nvml ? nvml->sm : 0)) +
                      attr("rank", "-1") + attr("gdr", gdr ? "1" : "0") + ">\n";
    if (nvml) {
      for (const auto& [target, count] : nvml->nvlinks) {
        const bool to_switch = nvml->nvlink_to_switch.at(target);
        // A link to a GPU outside this view (hidden from hwloc) has no node to end at.
        if (!to_switch && !is_discovered_gpu(target)) continue;
        out += pad + "  <nvlink" + attr("target", target) + attr("count", std::to_string(count)) +
               attr("tclass", to_switch ? kNvSwitchClass : read_line("/sys/bus/pci/devices/" + target + "/class")) +
               "/>\n";
        report_.nvlink_links += count;
      }
    }
    if (obj->attr->pcidev.vendor_id == kVendorAmd)
      out += xgmi_elements(rocm_smi_, busid, gpu_classes_, depth + 1, &report_.xgmi_links);
    return out + pad + "</gpu>\n";
  }

  // The emulated device's GPUs: no PCI class, speed or width, as no PCI
  // device is behind them; rank -1, like every discovered GPU.
  std::string write_emulated_gpus(int depth) {
    const std::string pad(2 * depth, ' ');
    std::string out;
    for (int dev = 0; dev < emulated_devices_; ++dev) {
      out += pad + "<pci" + attr("busid", kEmulatedBusPrefix + std::to_string(dev)) + ">\n" + pad + "  <gpu" +
             attr("dev", std::to_string(dev)) + attr("sm", "0") + attr("rank", "-1") + attr("gdr", "0") + "/>\n" +
             pad + "</pci>\n";
      ++report_.emulated_gpus;
    }
    return out;
  }

  // One <net> per verbs device of the PCI function, else per interface.
  std::string write_nets(hwloc_obj_t obj, int depth) {
    const std::string pad(2 * depth, ' ');
    bool openfabrics = false;
    for (hwloc_obj_t child = obj->io_first_child; child; child = child->next_sibling)
      openfabrics = openfabrics || (child->type == HWLOC_OBJ_OS_DEVICE &&
                                    child->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS);
    const hwloc_obj_osdev_type_t wanted = openfabrics ? HWLOC_OBJ_OSDEV_OPENFABRICS : HWLOC_OBJ_OSDEV_NETWORK;
    std::string out;
    for (hwloc_obj_t child = obj->io_first_child; child; child = child->next_sibling) {
      if (child->type != HWLOC_OBJ_OS_DEVICE || child->attr->osdev.type != wanted || !child->name) continue;
      out += pad + "<net" + attr("name", child->name) + attr("dev", std::to_string(net_devices_++)) +
             attr("speed", std::to_string(net_speed_mbps(child->name, openfabrics))) +
             attr("port", openfabrics ? "1" : "0") + attr("gdr", openfabrics && gdr_ ? "1" : "0") + "/>\n";
    }
    return out;
  }

  hwloc_topology_t topology_;
  const NvmlScan& nvml_;
  const RocmSmiScan& rocm_smi_;
  const int emulated_devices_;
  DiscoveryReport& report_;
  const bool gdr_;
  std::vector<std::pair<std::string, int>> gpu_busids_;
  std::map<std::string, std::string> gpu_classes_;  // PCI class by bus id
  int net_devices_ = 0;
};

// The version built against; the library loaded has the same ABI (2.x).
std::string hwloc_version() { return std::string("hwloc ") + HWLOC_VERSION; }

}  // namespace

Status discover_topology_xml(int emulated_devices, std::string* xml, DiscoveryReport* report) {
  const auto start = std::chrono::steady_clock::now();
  DiscoveryReport found;
  hwloc_topology_t topology;
  if (hwloc_topology_init(&topology) != 0) {
    found.hwloc_note = hwloc_version() + ": hwloc_topology_init failed";
    if (report) *report = found;
    return Status::kSystemError;
  }
  hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // Plugins that would start a GPU runtime or display stack inside the
  // application's process; NVML and ROCm SMI are asked directly, and only
  // for NVLink and xGMI.
  for (const char* component : {"cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"})
    hwloc_topology_set_components(topology, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
  if (hwloc_topology_load(topology) != 0) {
    found.hwloc_note = hwloc_version() + ": hwloc_topology_load failed";
    hwloc_topology_destroy(topology);
    if (report) *report = found;
    return Status::kSystemError;
  }
  found.hwloc = true;
  found.hwloc_note = hwloc_version();

  // NVML only where hwloc saw an NVIDIA GPU, ROCm SMI only where it saw an
  // AMD one: elsewhere they have nothing to say.
  std::vector<std::string> amd_busids;
  for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_pcidev(topology, obj));) {
    found.nvidia_gpus += is_gpu(obj) && obj->attr->pcidev.vendor_id == kVendorNvidia;
    if (is_gpu(obj) && obj->attr->pcidev.vendor_id == kVendorAmd) amd_busids.push_back(busid_of(obj->attr->pcidev));
  }
  found.amd_gpus = static_cast<int>(amd_busids.size());
  NvmlScan nvml;
  if (found.nvidia_gpus > 0) {
    nvml = scan_nvml();
  } else {
    nvml.note = "not asked (no NVIDIA GPU on the PCI bus)";
  }
  found.nvml = nvml.loaded;
  found.nvml_note = nvml.note;
  RocmSmiScan rocm_smi;
  if (found.amd_gpus > 0) {
    rocm_smi = scan_rocm_smi();
  } else {
    rocm_smi.note = "not asked (no AMD GPU on the PCI bus)";
  }
  for (const std::string& busid : amd_busids)
    for (const RocmSmiGpu& gpu : rocm_smi.gpus)
      if (gpu.busid == busid) {
        ++found.rocm_smi_gpus;
        break;
      }
  found.rocm_smi = rocm_smi.loaded;
  found.rocm_smi_note = rocm_smi.note;

  *xml = HwlocWriter(topology, nvml, rocm_smi, emulated_devices, found).write();
  hwloc_topology_destroy(topology);
  found.milliseconds = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  FERRY_INFO(Topo, "discovered %d NUMA node(s), %d PCI switch(es), %d GPU(s), %d NIC(s), %d NVLink link(s), "
             "%d xGMI link(s) in %.1f ms (%s; NVML: %s; rocm-smi: %s); %d emulated GPU(s)", found.numa_nodes,
             found.pci_switches, found.gpus, found.nics, found.nvlink_links, found.xgmi_links, found.milliseconds,
             found.hwloc_note.c_str(), found.nvml_note.c_str(), found.rocm_smi_note.c_str(), found.emulated_gpus);
  if (report) *report = found;
  return Status::kOk;
}

#else  // no hwloc at build time

Status discover_topology_xml(int, std::string*, DiscoveryReport* report) {
  DiscoveryReport found;
  found.hwloc_note = "Ferry was built without hwloc (install libhwloc-dev and rebuild)";
  found.nvml_note = "not used (no hwloc)";
  found.rocm_smi_note = "not used (no hwloc)";
  FERRY_INFO(Topo, "no topology discovery: %s", found.hwloc_note.c_str());
  if (report) *report = found;
  return Status::kUnavailable;
}

#endif

Status discover_topology(int emulated_devices, SystemGraph& graph, DiscoveryReport* report) {
  std::string xml, error;
  FERRY_CHECK(discover_topology_xml(emulated_devices, &xml, report));
  if (!ok(load_topology_xml(xml, graph, &error))) {
    // Discovery wrote something its own reader rejects: a bug, said plainly.
    FERRY_WARN(Topo, "discovered topology does not load (%s):\n%s", error.c_str(), xml.c_str());
    return Status::kInternal;
  }
  return Status::kOk;
}

}  // namespace ferry
