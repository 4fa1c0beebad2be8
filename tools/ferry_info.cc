// ferry-info: what Ferry sees on this machine and how it is configured.
//   ferry-info             version, device backend, devices, parameters
//   ferry-info --markdown  the parameter table as Markdown (README.md's)
//   ferry-info --topo FILE [FILE...]
//                          what Ferry makes of NCCL-style topology XML (one
//                          file per host): GPUs by rank, the path and
//                          transport between every pair, rings and trees
//   ferry-info --discover [--ranks N]   (or --topo with no file)
//                          the topology the engine would use here
//                          (FERRY_TOPO_FILE, else discovered), and the
//                          search over N ranks of this machine
//   ferry-info --self-test checks a user debugging a cluster wants, one
//                          PASS/FAIL/SKIP line each; exits 1 on a failure
//   ferry-info --model [--bytes LIST] [--machine nvlink|pcie|multinode]
//                          the tuner's predicted allreduce time and bus
//                          bandwidth for 2..4096 ranks: ring vs tree, and
//                          the direct algorithms where they apply
//   ferry-info --version, --help
//
// The sections live beside this file, one per mode (ferry_info.h):
// ferry_info_report.cc, ferry_info_topology.cc, ferry_info_self_test.cc
// (with ferry_info_links.cc under PMIx) and ferry_info_model.cc.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ferry/ferry.h"
#include "tools/ferry_info.h"

namespace {

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: ferry-info [OPTION]\n"
               "What Ferry sees on this machine and how it is configured.\n\n"
               "  (no option)           version, device backend, devices, parameters in effect\n"
               "  --markdown            the parameter table as Markdown (the README's)\n"
               "  --topo FILE...        what Ferry makes of NCCL-style topology XML, one file a host\n"
               "  --discover [--ranks N]  the topology the engine would use here, and its search\n"
               "                        over N ranks of this machine\n"
               "  --self-test           checks for debugging a cluster, one PASS/FAIL/SKIP line each\n"
               "                        (under mpirun -np N: across the ranks); exit 1 on a failure\n"
               "  --model [--bytes 8,1M,256M] [--machine nvlink|pcie|multinode]\n"
               "                        the tuner's predicted allreduce time and bus bandwidth\n"
               "  --version             Ferry's version\n"
               "  --help                this text\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if ((mode == "--help" || mode == "-h") && argc == 2) {
    print_usage(stdout);
    return 0;
  }
  if ((mode == "--version" || mode == "-V") && argc == 2) {
    std::printf("ferry-info (Ferry) %d.%d.%d\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR, FERRY_VERSION_PATCH);
    return 0;
  }
  if (mode == "--markdown" && argc == 2) {
    ferry_info::print_markdown_table();
    return 0;
  }
  if (mode == "--topo" && argc > 2) return ferry_info::print_topology(argc - 2, argv + 2);
  if ((mode == "--topo" || mode == "--discover") &&
      (argc == 2 || (argc == 4 && std::strcmp(argv[2], "--ranks") == 0 && std::atoi(argv[3]) > 0)))
    return ferry_info::print_local_topology(argc == 4 ? std::atoi(argv[3]) : 0);
  if (mode == "--self-test" && argc == 2) return ferry_info::self_test();
  if (mode == "--model") {
    const int rc = ferry_info::model_command(argc - 2, argv + 2);
    if (rc >= 0) return rc;
  }
  if (argc > 1) {
    std::fprintf(stderr, "ferry-info: unknown option %s\n", argv[1]);
    print_usage(stderr);
    return 2;
  }
  ferry_info::print_report();
  return 0;
}
