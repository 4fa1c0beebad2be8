// ferry-info --self-test's record of checks, shared by the checks of this
// machine (ferry_info_self_test.cc) and, under a PMIx launcher, the links
// between the ranks (ferry_info_links.cc).
#pragma once

#include <cstdio>
#include <string>

#include "engine/gpu/gpu.h"

namespace ferry_info {

struct SelfTest {
  int passed = 0, skipped = 0, failed = 0;
  // Under a launcher only rank 0 prints everything; other ranks print their
  // failures, named.
  bool quiet = false;
  std::string prefix;

  void pass(const char* check, const std::string& detail) { report("PASS", check, detail, passed); }
  void skip(const char* check, const std::string& detail) { report("SKIP", check, detail, skipped); }
  void fail(const char* check, const std::string& detail) { report("FAIL", check, detail, failed); }

  void report(const char* verdict, const char* check, const std::string& detail, int& counter) {
    ++counter;
    if (quiet && &counter != &failed) return;
    std::printf("%s%s %s: %s\n", prefix.c_str(), verdict, check, detail.c_str());
    std::fflush(stdout);
  }
};

#ifdef FERRY_INFO_HAVE_PMIX
// Under a PMIx launcher (mpirun -np N ferry-info --self-test): every rank
// pulls from every other over the transport the engine chose between them,
// one ordered pair at a time, checks the bytes, and rank 0 reports each link.
// Every rank must call it: it sets up an engine communicator over PMIx.
void check_links(SelfTest& test, ferry::gpu::Backend* backend);
#endif

}  // namespace ferry_info
