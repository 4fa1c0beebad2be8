#include "engine/common/nvtx.h"

#include <cstdlib>

#ifdef FERRY_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace ferry {
namespace {

bool tool_attached() {
#ifdef FERRY_HAVE_CUDA
  const char* tool = std::getenv("NVTX_INJECTION64_PATH");
  return tool && *tool;
#else
  return false;
#endif
}

}  // namespace

const bool g_nvtx_attached = tool_attached();

#ifdef FERRY_HAVE_CUDA
void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }
std::uint64_t nvtx_start(const char* name) { return nvtxRangeStartA(name); }
void nvtx_end(std::uint64_t id) {
  if (id) nvtxRangeEnd(id);
}
#else
void nvtx_push(const char*) {}
void nvtx_pop() {}
std::uint64_t nvtx_start(const char*) { return 0; }
void nvtx_end(std::uint64_t) {}
#endif

}  // namespace ferry
