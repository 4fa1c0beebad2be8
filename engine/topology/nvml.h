// What NVML says about this machine's NVIDIA GPUs: identity, compute
// capability, NVLink links and peer access. libnvidia-ml.so.1 is opened with
// dlopen on first use, never linked: without the driver there is no NVML,
// and the answer says so.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ferry {

struct NvmlGpu {
  std::string busid;  // "0000:1b:00.0", lower case, as in the topology XML
  int index = -1;     // NVML's device index
  int sm = 0;         // compute capability, major * 10 + minor
  // Active NVLink links by the bus id at their far end (a GPU or a switch
  // chip), and whether that end is an NVSwitch.
  std::map<std::string, int> nvlinks;
  std::map<std::string, bool> nvlink_to_switch;
};

struct NvmlScan {
  bool loaded = false;  // libnvidia-ml.so.1 opened and initialised
  std::string note;     // why not, or the driver version
  std::vector<NvmlGpu> gpus;
  // p2p_read[a][b]: nvmlDeviceGetP2PStatus(READ) between gpus[a] and
  // gpus[b]; 0 is OK (NVML_P2P_STATUS_OK).
  std::vector<std::vector<int>> p2p_read;
};

// One pass over NVML (initialised and shut down inside): safe to call from
// any process, costs tens of milliseconds where a driver is present.
NvmlScan scan_nvml();

// NVML's name for a P2P status code.
const char* nvml_p2p_status_name(int status);

}  // namespace ferry
