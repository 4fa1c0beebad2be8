// ferry-bench: Ferry against NCCL and against staging by hand, on the same
// device buffers, in one run.
//
//   mpirun -np 2 -x LD_PRELOAD=/path/libferry.so ferry-bench [options]
//
// For each operation and size, three columns, each checked against a host
// reference and then timed:
//   ferry             the plain MPI call, which Ferry intercepts (its default
//                     route for device buffers);
//   nccl              NCCL, opened at run time; skipped when it cannot be;
//   staged (by hand)  what a user writes without a CUDA-aware MPI: copy to host,
//                     MPI on the host copies, copy back. Ferry reads
//                     FERRY_ROUTE once at start-up, so its own staged route
//                     cannot be timed in the same run as its default one;
//   host mpi          with --host: the same call on host buffers and no
//                     copies (the real MPI's own path, across nodes the raw
//                     path under Ferry's net transport).
// Only rank 0 prints: notes, then one table row per (operation, size).
//
// NCCL is --nccl PATH, else libnccl.so.2 on the loader's path, and runs with
// NCCL_NVLS_ENABLE=0 (NVLink multicast stays off on the shared GPU machine),
// set by ferry-bench before NCCL starts.
//
// This file holds the run; its parts, each a .h/.cc pair beside it:
//   ferry_bench_options      the command line, the sizes, iterations per size
//   ferry_bench_ops          the operations, their input data, the MPI calls
//   ferry_bench_memory       Ferry's entry points, device and host buffers
//   ferry_bench_methods      the ferry and staged (by hand) columns
//   ferry_bench_nccl_method  the nccl column (built with the CUDA toolkit only)
//   ferry_bench_check        the host reference every column is checked against
//   ferry_bench_timing       warm-up, timed iterations, median of the slowest rank
//   ferry_bench_report       the table and the CSV file
// and two headers: ferry_bench_cuda.h (the CUDA runtime behind one switch)
// and ferry_bench_nccl.h (NCCL opened with dlopen).
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry_bench_check.h"
#include "ferry_bench_cuda.h"
#include "ferry_bench_memory.h"
#include "ferry_bench_methods.h"
#include "ferry_bench_ops.h"
#include "ferry_bench_options.h"
#include "ferry_bench_report.h"
#include "ferry_bench_timing.h"
#include "raw_tcp.h"
#ifdef FERRY_BENCH_HAVE_CUDA
#include "ferry_bench_nccl_method.h"
#endif

namespace ferry_bench {
namespace {

int local_rank() {
  const char* value = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return value ? std::atoi(value) : 0;
}

int run(int argc, char** argv, int rank, int nranks) {
  const Options options = parse_options(argc, argv);
  if (options.help) {
    if (rank == 0) std::printf("%s", kUsage);
    return 0;
  }
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");

  const FerryApi ferry = find_ferry();
  const std::string backend = ferry.backend();
  if (backend != "cuda" && backend != "emulated")
    throw std::runtime_error("libferry.so reports device backend '" + backend + "' (check FERRY_DEVICE)");
  // CUDA events, streams, pinned memory and NCCL need both a GPU and a build with the toolkit.
  const bool use_cuda = backend == "cuda" && cuda::kCompiled;
  if (use_cuda) cuda::use_device_of_local_rank(local_rank());

  std::vector<std::string> notes;
  notes.push_back("ferry-bench: " + std::to_string(nranks) + (nranks == 1 ? " rank" : " ranks") +
                  ", Ferry device backend: " + backend + ", float32 data, root 0");
  notes.push_back(
      "us: median over iterations of the slowest rank's time per call, host clock around the "
      "blocking call (nccl: launch + stream sync)");
  if (use_cuda) notes.push_back("gpu us: the same from CUDA events on the operation's stream, a separate pass");
  notes.push_back(
      "busbw: GB/s from the us column, as nccl-tests defines it; alltoallv bytes: a rank's whole "
      "send buffer, equal blocks");
  notes.push_back("every column of every row is checked against a host reference before it is timed");
  if (backend == "cuda" && !cuda::kCompiled)
    notes.push_back("built without the CUDA toolkit: host clock only, no nccl column");

  std::vector<Case> cases;
  std::uint64_t seed = 1;
  bool alltoallv_skipped = false;
  for (Op op : options.ops) {
    for (std::size_t bytes : size_series(options, backend == "emulated")) {
      if (std::optional<Case> c = make_case(op, bytes, nranks, seed++)) {
        cases.push_back(std::move(*c));
      } else {
        alltoallv_skipped = true;
      }
    }
  }
  if (backend == "emulated" && options.sizes.empty() && !options.max_size)
    notes.push_back("emulated device: sizes up to " + human_bytes(kEmulatedDefaultMaxBytes) + " unless --max-size");
  if (alltoallv_skipped)
    notes.push_back("alltoallv skips sizes under " + std::to_string(nranks * sizeof(float)) + " bytes");
  std::size_t max_count = 0;
  for (const Case& c : cases) max_count = std::max(max_count, c.count);
  if (max_count == 0) throw UsageError("no size to run");

  Harness harness(ferry, max_count, rank, nranks);
  const Buffers device = harness.device();
  std::array<std::unique_ptr<Method>, kMethodCount> methods;
  methods[kFerry] = std::make_unique<FerryMethod>(device, use_cuda);

  std::unique_ptr<HostBuffer> staging_send, staging_recv;
  if (options.staged) {
    staging_send = std::make_unique<HostBuffer>(max_count * sizeof(float), use_cuda);
    staging_recv = std::make_unique<HostBuffer>(max_count * sizeof(float), use_cuda);
    const CopyFunction copy = use_cuda ? cuda::copy : ferry.copy;
    methods[kStaged] =
        std::make_unique<StagedMethod>(device, Buffers{staging_send->get(), staging_recv->get()}, copy, rank);
    notes.push_back(use_cuda ? "staged (by hand): cudaMemcpy device->pinned host, MPI on host buffers, copy back"
                             : "staged (by hand): ferry_memcpy device->host, MPI on host buffers, copy back");
  }
  if (options.host) {
    if (!staging_send) {
      staging_send = std::make_unique<HostBuffer>(max_count * sizeof(float), use_cuda);
      staging_recv = std::make_unique<HostBuffer>(max_count * sizeof(float), use_cuda);
    }
    const CopyFunction copy = use_cuda ? cuda::copy : ferry.copy;
    methods[kHost] =
        std::make_unique<HostMethod>(device, Buffers{staging_send->get(), staging_recv->get()}, copy, rank);
    notes.push_back("host mpi (no copies): the same MPI call on host buffers, timed without copies");
  }

  std::string nccl_note = use_cuda ? "" : "nccl column skipped: no GPU in use (device backend " + backend + ")";
#ifdef FERRY_BENCH_HAVE_CUDA
  if (use_cuda && options.nccl_path == "none") nccl_note = "nccl column skipped: --nccl none";
  if (use_cuda && options.nccl_path != "none") methods[kNccl] = start_nccl(options, device, rank, nranks, &nccl_note);
#endif
  if (!nccl_note.empty()) notes.push_back(nccl_note);

  // The socket provider's floor between ranks 0 and 1, before the table.
  auto format_us = [](double us) {
    char text[32];
    std::snprintf(text, sizeof text, us < 0 ? "(no socket)" : "%.2f us", us);
    return std::string(text);
  };
  auto format_gbps = [](double gbps) {
    char text[32];
    std::snprintf(text, sizeof text, gbps < 0 ? "(no socket)" : "%.2f GB/s", gbps);
    return std::string(text);
  };
  std::vector<std::string> raw_tcp;
  if (options.raw_tcp_streams > 0 && nranks >= 2) {
    const double one_way = bench::raw_tcp_one_way_us(MPI_COMM_WORLD, 1000);
    raw_tcp.push_back("raw tcp, ranks 0 and 1: 8-byte ping-pong " + format_us(one_way) + " one way");
    std::vector<std::size_t> sizes;
    for (const Case& c : cases) sizes.push_back(c.bytes());
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    for (std::size_t bytes : sizes) {
      const int iterations = std::min(20, plan_for(bytes, options).timed);
      const double gbps = bench::raw_tcp_streaming_gbps(MPI_COMM_WORLD, bytes, options.raw_tcp_streams, iterations);
      raw_tcp.push_back("raw tcp, rank 0 -> 1 over " + std::to_string(options.raw_tcp_streams) + " connections: " +
                        human_bytes(bytes) + " " + format_gbps(gbps));
    }
  }

  std::optional<cuda::EventTimer> timer;
  if (use_cuda) timer.emplace();
  std::array<bool, kMethodCount> runs{}, gpu_timed{};
  for (int m = 0; m < kMethodCount; ++m) {
    runs[m] = methods[m] != nullptr;
    gpu_timed[m] = runs[m] && timer && methods[m]->event_stream();
  }
  const Table table(runs, gpu_timed, nranks);
  std::unique_ptr<CsvFile> csv;
  if (rank == 0) {
    if (!options.csv_path.empty()) csv = std::make_unique<CsvFile>(options.csv_path, nranks);
    for (const std::string& note : notes) std::printf("# %s\n", note.c_str());
    for (const std::string& line : raw_tcp) std::printf("# %s\n", line.c_str());
    table.print_header();
  }

  for (const Case& c : cases) {
    harness.prepare(c);
    const IterationPlan plan = plan_for(c.bytes(), options);
    Row row{c.op, c.bytes(), plan.timed, {}};
    for (int m = 0; m < kMethodCount; ++m) {
      if (!methods[m]) continue;
      harness.verify(*methods[m], kMethodTitles[m], c);
      row.timings[m] = measure(*methods[m], c, plan, timer ? &*timer : nullptr);
    }
    if (rank == 0) {
      table.print_row(row);
      if (csv) csv->write_row(row);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ferry_bench

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int status = 0;
  try {
    status = ferry_bench::run(argc, argv, rank, nranks);
  } catch (const ferry_bench::UsageError& error) {
    if (rank == 0) std::fprintf(stderr, "ferry-bench: %s\n%s", error.what(), ferry_bench::kUsage);
    status = 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ferry-bench (rank %d): %s\n", rank, error.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
