// ferry-info: what Ferry sees on this machine and how it is configured.
//   ferry-info             version, device backend, devices, parameters
//   ferry-info --markdown  the parameter table as Markdown (README.md's)
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/collectives/tuner.h"
#include "engine/common/params.h"
#include "engine/gpu/gpu.h"
#include "ferry/ferry.h"

namespace {

void print_markdown_table() {
  std::printf("| variable | type | default | description |\n| --- | --- | --- | --- |\n");
  for (const ferry::ParamInfo& p : ferry::describe_params()) {
    std::printf("| `%s` | %s | `%s` | %s |\n", p.env_name.c_str(), p.type,
                *p.default_value ? p.default_value : "(empty)", p.description);
  }
}

void print_report() {
  std::printf("Ferry %d.%d.%d\n\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH);
#ifdef FERRY_HAVE_CUDA
  std::printf("built with: CUDA backend, emulated device\n");
#else
  std::printf("built with: emulated device (no CUDA toolkit at build time)\n");
#endif
  ferry::gpu::Backend* backend = ferry::gpu::active_backend();
  std::printf("device backend: %s\n",
              ferry::gpu::backend_kind_name(backend ? backend->kind() : ferry::gpu::BackendKind::kNone));
  if (backend) std::printf("%s\n", backend->describe_devices().c_str());

  std::printf("\nallreduce algorithms (FERRY_TUNE=allreduce:MIN-MAX:name,...):\n");
  for (int a = 0; a < static_cast<int>(ferry::AllreduceAlgorithm::kCount); ++a) {
    const ferry::AlgorithmInfo& info = ferry::algorithm_info(static_cast<ferry::AllreduceAlgorithm>(a));
    std::printf("  %-11s %s%s\n", info.name, info.description, info.in_place_safe ? "" : " (not in place)");
  }

  std::printf("\nparameters (set in the environment marked *):\n");
  for (const ferry::ParamInfo& p : ferry::describe_params()) {
    std::printf("%c %-30s = %-12s %s\n", p.set_in_environment ? '*' : ' ', p.env_name.c_str(),
                p.value.empty() ? "\"\"" : p.value.c_str(), p.description);
  }
  for (const std::string& problem : ferry::param_problems()) std::printf("warning: %s\n", problem.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--markdown") == 0) {
    print_markdown_table();
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "usage: ferry-info [--markdown]\n");
    return 2;
  }
  print_report();
  return 0;
}
