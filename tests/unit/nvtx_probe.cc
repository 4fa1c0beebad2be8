// An NVTX tool for the tests (NVTX_INJECTION64_PATH): prints every range a
// process opens ("nvtx push NAME", "nvtx start NAME") to standard error,
// and at exit "nvtx balanced" when every pushed range was popped and every
// started one ended, else the counts.
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<long> pushes{0}, pops{0}, starts{0}, ends{0};
std::atomic<nvtxRangeId_t> next_id{1};

int push(const char* name) {
  std::fprintf(stderr, "nvtx push %s\n", name);
  return static_cast<int>(++pushes);
}
int pop() {
  ++pops;
  return 0;
}
nvtxRangeId_t start(const char* name) {
  std::fprintf(stderr, "nvtx start %s\n", name);
  ++starts;
  return next_id++;
}
void end(nvtxRangeId_t) { ++ends; }

void report() {
  if (pushes == pops && starts == ends)
    std::fprintf(stderr, "nvtx balanced\n");
  else
    std::fprintf(stderr, "nvtx unbalanced: %ld pushes, %ld pops, %ld starts, %ld ends\n", pushes.load(),
                 pops.load(), starts.load(), ends.load());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
      size <= NVTX_CBID_CORE_RangePop)
    return 0;
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(push);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(pop);
  *table[NVTX_CBID_CORE_RangeStartA] = reinterpret_cast<NvtxFunctionPointer>(start);
  *table[NVTX_CBID_CORE_RangeEnd] = reinterpret_cast<NvtxFunctionPointer>(end);
  std::atexit(report);
  return 1;
}
