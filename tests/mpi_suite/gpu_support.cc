// What an application that asks before passing device pointers is told:
// 1 under Ferry with a device backend, 0 on the plain MPI (these Debian and
// PyPI builds have no CUDA support of their own on a machine without a GPU).
// Open MPI's question is MPIX_Query_cuda_support (mpi-ext.h), MPICH's
// MPIX_GPU_query_support and MPIX_Query_cuda_support (mpi.h).
#include <mpi.h>

#include <cstring>
#include <string>

#include "suite.h"

#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

namespace {

using namespace suite;

int expected_answer() {
  const char* backend = suite_ferry_backend();
  return backend && std::strcmp(backend, "none") != 0 ? 1 : 0;
}

Case query_case(const char* call) {
  const char* backend = suite_ferry_backend();
  return Case{call, "", "", 0, "", std::string("libferry.so backend=") + (backend ? backend : "not loaded")};
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  const int expected = expected_answer();
#if defined(MPIX_CUDA_AWARE_SUPPORT) || defined(MPIX_GPU_SUPPORT_CUDA)
  const int reported = MPIX_Query_cuda_support();
  expect(reported == expected, query_case("MPIX_Query_cuda_support"),
         "returned " + std::to_string(reported) + ", expected " + std::to_string(expected));
#endif
#if defined(MPIX_GPU_SUPPORT_CUDA)
  int cuda = -1;
  check_mpi(MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &cuda), query_case("MPIX_GPU_query_support"));
  expect(cuda == expected, query_case("MPIX_GPU_query_support"),
         "CUDA: " + std::to_string(cuda) + ", expected " + std::to_string(expected));
#endif
  return finish();
}
