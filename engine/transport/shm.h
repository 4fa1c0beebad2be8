// The shm transport: one host shared-memory segment per rank, mapped by
// every rank of the machine and registered with the device, so that copy
// engines and kernels reach the peers' data through host memory where
// device memory cannot be mapped across processes (no peer access, or
// FERRY_P2P_DISABLE=1).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/bootstrap/bootstrap.h"
#include "engine/gpu/gpu.h"

namespace ferry {

class SharedSegments {
 public:
  // Collective over the bootstrap's ranks, which must share one machine.
  // The segments are pinned for backend's device; backend nullptr leaves
  // them plain host memory.
  static Status create(Bootstrap& bootstrap, gpu::Backend* backend, std::size_t bytes,
                       std::unique_ptr<SharedSegments>* out);
  ~SharedSegments();
  SharedSegments(const SharedSegments&) = delete;
  SharedSegments& operator=(const SharedSegments&) = delete;

  std::size_t bytes() const { return bytes_; }
  // This process's view of rank's segment.
  char* segment(int rank) const { return views_[rank]; }

 private:
  SharedSegments(gpu::Backend* backend, std::size_t bytes) : backend_(backend), bytes_(bytes) {}

  gpu::Backend* backend_;
  std::size_t bytes_;
  int fd_ = -1;
  std::vector<char*> views_;
  std::vector<bool> registered_;
};

}  // namespace ferry
