// The ranks of one engine communicator: what each one is (machine,
// process, device backend and device), told to the others at set-up, and
// what follows from everyone's (which ranks share a machine or a GPU, and
// who leads each GPU).
#pragma once

#include <cstdint>
#include <vector>

namespace ferry {

// What each rank tells the others at set-up.
struct RankIdentity {
  std::uint64_t host_hash;  // same value on every process of one machine (boot)
  std::int32_t pid;
  std::int32_t backend;     // gpu::backend_id of the process's active backend
  std::int32_t device_count;
  std::int32_t has_device;   // it had chosen a device at set-up; then:
  std::uint64_t device_key;  // gpu::Backend::device_key of that device
  std::int32_t takes_turns;  // it runs kernels of processes in turns (gpu::Backend::processes_take_turns)
  std::int32_t physical_devices;  // gpu::Backend::physical_devices
};
static_assert(sizeof(RankIdentity) == 40, "RankIdentity travels between processes; keep its layout fixed");

// Whether two ranks in two processes use one GPU of one machine whose
// processes' kernels take turns (CUDA without MPS; one process's kernels run
// at once). A resident kernel (the engine worker) then holds the GPU through
// its process's time slices: a call waits out the other process's slice at
// every step (bench/RESULTS.md), so such a communicator runs no worker.
bool ranks_take_turns_on_a_gpu(const std::vector<RankIdentity>& ranks);

// Whether every rank uses one and the same GPU (one machine, one device
// backend, one device key; each had chosen its device at set-up), as
// several processes under MPS do: their LL lines then stay in that GPU's
// memory.
bool ranks_share_one_gpu(const std::vector<RankIdentity>& ranks);

// For each rank, the lowest rank on its GPU (one machine, one device
// backend, one device key); empty when no two ranks share a GPU.
std::vector<int> gpu_leaders(const std::vector<RankIdentity>& ranks);

// This process's identity: its machine (machine_identity), pid, and the
// active backend's device if it had chosen one.
RankIdentity this_rank_identity();

// Whether two ranks run on one machine (machine_identity: host name and
// boot id, FERRY_HOSTNAME when set).
inline bool same_machine(const RankIdentity& a, const RankIdentity& b) { return a.host_hash == b.host_hash; }

// Whether every rank runs on one machine.
bool ranks_on_one_machine(const std::vector<RankIdentity>& ranks);

}  // namespace ferry
