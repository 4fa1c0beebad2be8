// A stand-in for librocm_smi64 with the C signatures of ROCm SMI's
// rocm_smi.h, answering for a made-up machine, so that the loader's whole
// path (dlopen, every call, the BDFID, the links) runs without AMD GPUs:
//   device 0: 0000:0c:00.0
//   device 1: 0000:22:00.0, partition 0 in bits 31..28
//   device 2: 0000:0c:00.0 again, partition 1 in the function bits
//   device 3: 0001:9f:00.0
// 0 and 1 (and 2, GPU 0's second partition, and 1) are joined by two xGMI
// links (50-100 GB/s); 3 reaches the others over PCIe, three hops.
#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace {

constexpr std::uint32_t kSuccess = 0, kInvalidArgs = 1, kNotSupported = 2, kOutOfBounds = 7;
constexpr std::uint32_t kPcie = 1, kXgmi = 2;
constexpr std::uint32_t kDevices = 4;
constexpr std::uint64_t kBdfid[kDevices] = {0x0c00, 0x2200, 0x0c01, std::uint64_t{1} << 32 | 0x9f00};
const char* const kNames[kDevices] = {"Fake MI250X", "Fake MI250X", "Fake MI250X", "Fake Radeon"};

bool xgmi(std::uint32_t a, std::uint32_t b) { return a != b && a != 3 && b != 3; }

}  // namespace

extern "C" {

struct FakeRsmiVersion {
  std::uint32_t major, minor, patch;
  const char* build;
};

std::uint32_t rsmi_init(std::uint64_t) { return kSuccess; }
std::uint32_t rsmi_shut_down() { return kSuccess; }

std::uint32_t rsmi_version_get(FakeRsmiVersion* version) {
  if (!version) return kInvalidArgs;
  *version = {9, 8, 7, "fake"};
  return kSuccess;
}

std::uint32_t rsmi_status_string(std::uint32_t, const char** text) {
  if (!text) return kInvalidArgs;
  *text = "fake status";
  return kSuccess;
}

std::uint32_t rsmi_num_monitor_devices(std::uint32_t* count) {
  if (!count) return kInvalidArgs;
  *count = kDevices;
  return kSuccess;
}

std::uint32_t rsmi_dev_pci_id_get(std::uint32_t device, std::uint64_t* bdfid) {
  if (!bdfid) return kInvalidArgs;
  if (device >= kDevices) return kOutOfBounds;
  *bdfid = kBdfid[device];
  return kSuccess;
}

std::uint32_t rsmi_dev_name_get(std::uint32_t device, char* name, std::size_t length) {
  if (!name) return kInvalidArgs;
  if (device >= kDevices) return kOutOfBounds;
  std::snprintf(name, length, "%s", kNames[device]);
  return kSuccess;
}

std::uint32_t rsmi_topo_get_link_type(std::uint32_t a, std::uint32_t b, std::uint64_t* hops, std::uint32_t* type) {
  if (!hops || !type) return kInvalidArgs;
  if (a >= kDevices || b >= kDevices) return kOutOfBounds;
  *hops = a == b ? 0 : xgmi(a, b) ? 1 : 3;
  *type = xgmi(a, b) ? kXgmi : kPcie;
  return kSuccess;
}

std::uint32_t rsmi_topo_get_link_weight(std::uint32_t a, std::uint32_t b, std::uint64_t* weight) {
  if (!weight) return kInvalidArgs;
  if (a >= kDevices || b >= kDevices) return kOutOfBounds;
  *weight = a == b ? 0 : xgmi(a, b) ? 15 : 72;
  return kSuccess;
}

// As the real library: xGMI pairs one hop apart only.
std::uint32_t rsmi_minmax_bandwidth_get(std::uint32_t a, std::uint32_t b, std::uint64_t* min, std::uint64_t* max) {
  if (!min || !max) return kInvalidArgs;
  if (a >= kDevices || b >= kDevices) return kOutOfBounds;
  if (!xgmi(a, b)) return kNotSupported;
  *min = 50000;
  *max = 100000;
  return kSuccess;
}

}  // extern "C"
