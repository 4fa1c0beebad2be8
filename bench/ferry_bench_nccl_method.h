// ferry-bench's NCCL column. Built only with the CUDA toolkit
// (FERRY_BENCH_HAVE_CUDA); NCCL itself is opened at run time
// (ferry_bench_nccl.h).
#pragma once

#include <memory>
#include <string>

#include "ferry_bench_memory.h"
#include "ferry_bench_methods.h"
#include "ferry_bench_options.h"

namespace ferry_bench {

// Every rank loads NCCL and joins one communicator over MPI_COMM_WORLD, or
// none does; *note says which NCCL, or why there is none. Sets
// NCCL_NVLS_ENABLE=0 before NCCL starts.
std::unique_ptr<Method> start_nccl(const Options& options, Buffers device, int rank, int nranks, std::string* note);

}  // namespace ferry_bench
