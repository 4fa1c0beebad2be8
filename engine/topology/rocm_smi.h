// What ROCm SMI says about this machine's AMD GPUs: each GPU's PCI bus id
// and name, and how each pair is linked (xGMI or PCIe, hops, weight, the
// xGMI bandwidth range). librocm_smi64 is opened with dlopen on first use,
// never linked: without ROCm (or the distribution's librocm-smi64-1) there
// is no rocm-smi, and the answer says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

// RSMI_IO_LINK_TYPE's values.
enum class RocmSmiLinkType { kUndefined = 0, kPcie = 1, kXgmi = 2 };

struct RocmSmiGpu {
  int index = -1;     // ROCm SMI's device index
  std::string busid;  // "0000:0c:00.0", lower case, function 0 (the bus id the OS gives the GPU)
  std::string name;   // rsmi_dev_name_get's, or empty
};

// How ROCm SMI links one GPU to another.
struct RocmSmiLink {
  bool known = false;  // rsmi_topo_get_link_type answered
  RocmSmiLinkType type = RocmSmiLinkType::kUndefined;
  std::uint64_t hops = 0;
  std::uint64_t weight = 0;  // 0: not given
  // MB/s, xGMI pairs one hop apart only (0: not given): one link's
  // bandwidth, and that of all the links between the pair.
  std::uint64_t min_mbps = 0, max_mbps = 0;
};

struct RocmSmiScan {
  bool loaded = false;  // the library opened and rsmi_init succeeded
  std::string library;  // the file opened, when one was
  std::string note;     // why not, or the library and its version
  std::vector<RocmSmiGpu> gpus;
  std::vector<std::vector<RocmSmiLink>> links;  // links[a][b]: gpus[a] to gpus[b]
};

// Where the library is looked for, in order: ROCm's own install first (it
// matches the kernel driver), then the dynamic linker's path, where
// Debian's and Ubuntu's librocm-smi64-1 puts librocm_smi64.so.1.
const std::vector<std::string>& rocm_smi_library_names();

// One pass over ROCm SMI (initialised and shut down inside), with the
// library looked for under names, in order; a copy the process has already
// loaded is used first, so two copies never meet in one process. Safe to
// call from any process; a machine without the amdgpu driver answers with
// rsmi_init's error in note.
RocmSmiScan scan_rocm_smi(const std::vector<std::string>& names = rocm_smi_library_names());

// ROCm SMI's BDFID (domain in bits 63..32, bus 15..8, device 7..3; the
// partition in 31..28 or in the function bits) as the bus id the OS gives
// the GPU: function 0, as partitions of one GPU share it.
std::string rocm_smi_busid(std::uint64_t bdfid);

// A direct xGMI link from one GPU: the GPU at its far end and how many
// links join the two (max_mbps / min_mbps, as RCCL counts them; 1 when
// ROCm SMI gives no bandwidth).
struct XgmiLink {
  std::string target;
  int count = 1;
};

// The GPUs that the GPU at busid reaches over one xGMI hop, as ROCm SMI
// says. Partitions of one GPU (the same bus id) count once, as its first
// device.
std::vector<XgmiLink> xgmi_links_of(const RocmSmiScan& scan, const std::string& busid);

const char* rocm_smi_link_type_name(RocmSmiLinkType type);

// One line per GPU (index, bus id, name) and per pair (type, hops, weight,
// bandwidth), for ferry-info.
std::string describe_rocm_smi(const RocmSmiScan& scan);

}  // namespace ferry
