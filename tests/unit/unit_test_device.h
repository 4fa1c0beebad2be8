// The device the GPU-facing unit tests run on: the emulated device, or GPU 0
// with FERRY_UNIT_TEST_DEVICE=cuda (nullptr there when CUDA has no GPU).
#pragma once

#include <cstdlib>
#include <cstring>

#include "engine/gpu/gpu.h"

namespace ferry::testing {

inline gpu::Backend* unit_test_device() {
  static gpu::Backend* const chosen = [] {
    const char* wanted = std::getenv("FERRY_UNIT_TEST_DEVICE");
    return wanted && std::strcmp(wanted, "cuda") == 0 ? gpu::cuda_backend() : gpu::emulated_backend();
  }();
  return chosen;
}

}  // namespace ferry::testing
