// What users' kernels need to drive a window themselves (include/ferry/
// device.h): every rank's window memory and sync block as this GPU reaches
// them, in device-resident tables. Created collectively over the window's
// ranks the first time a rank asks for the handle, freed with the window.
#pragma once

#include <memory>
#include <vector>

#include "engine/pgas/window.h"
#include "ferry/device_handle.h"

namespace ferry {

class DeviceAccess {
 public:
  // Words of each rank's sync block (device memory, mapped by every peer).
  static constexpr std::size_t kSyncWords = FERRY_DEVICE_SYNC_WORDS;

  // Collective over window's ranks.
  static Status create(Window& window, std::unique_ptr<DeviceAccess>* out);
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;

  const ferry_window_device_t& handle() const { return handle_; }

 private:
  DeviceAccess(gpu::Backend* backend, PeerMemory& peer_memory) : backend_(backend), peer_memory_(peer_memory) {}

  // Not the window: the window may go first when both are freed.
  gpu::Backend* backend_;
  PeerMemory& peer_memory_;
  ferry_window_device_t handle_{};
  void* sync_block_ = nullptr;  // this rank's
  std::vector<ExportedBuffer> peer_sync_blocks_;  // pinned where allocation_id != 0
  void* tables_ = nullptr;       // device memory behind the handle's pointers
};

}  // namespace ferry
