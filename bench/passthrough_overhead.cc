// Per-call latency of blocking MPI calls on HOST buffers, as the caller
// feels it. Run once with libferry.so preloaded and once without (see
// passthrough_overhead.sh): the difference is what Ferry's pass-through
// path costs an application that never touches a GPU.
//
// Usage: mpirun -n 2 passthrough_overhead [--iterations N] [--warmup N]
// Rank 0 prints one line per case:
//   case <name> bytes <n> median_us <x> p10_us <x> p90_us <x> batch_median_us <x>
// preceded by "preload <ferry|none>" so a driver can check that the
// preload really took effect. median/p10/p90 time each call on its own;
// batch_median_us is the median over batches of kBatchCalls calls of the
// batch time per call, for when the clock's tick (10 ns on some VMs) is too
// coarse for the difference being measured.
// A second line per case, "paired", alternates batches of the MPI_ call with
// batches of the same PMPI_ call in this one process: under the preload the
// MPI_ name is Ferry's wrapper and PMPI_ the real MPI, so the median of the
// pairs' differences is Ferry's cost per call, free of the drift between
// separate runs (without the preload both names are the same function).

#include <mpi.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

struct Options {
  int iterations = 20000;
  int warmup = 2000;
};

bool parse_options(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--iterations") == 0 && has_value) {
      options.iterations = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--warmup") == 0 && has_value) {
      options.warmup = std::atoi(argv[++i]);
    } else {
      return false;
    }
  }
  return options.iterations > 0 && options.warmup >= 0;
}

// A symbol from Ferry's public C API; present only when libferry.so is loaded.
bool ferry_is_loaded() { return dlsym(RTLD_DEFAULT, "ferry_device_backend") != nullptr; }

struct Percentiles {
  double p10_us, median_us, p90_us;
};

Percentiles percentiles_of(std::vector<double> samples_us) {
  std::sort(samples_us.begin(), samples_us.end());
  auto at = [&](double fraction) {
    return samples_us[static_cast<size_t>(fraction * (samples_us.size() - 1))];
  };
  return {at(0.10), at(0.50), at(0.90)};
}

using Clock = std::chrono::steady_clock;
constexpr int kBatchCalls = 100;

double microseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Times each call separately, back to back, after a warm-up. Every rank
// measures; rank 0's distribution is reported.
std::vector<double> time_each_call(const Options& options, const std::function<void()>& call) {
  for (int i = 0; i < options.warmup; ++i) call();
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> samples_us(options.iterations);
  for (double& sample_us : samples_us) {
    const auto start = Clock::now();
    call();
    sample_us = microseconds_since(start);
  }
  return samples_us;
}

// Time per call of each batch of kBatchCalls back-to-back calls.
std::vector<double> time_batches(const Options& options, const std::function<void()>& call) {
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> per_call_us((options.iterations + kBatchCalls - 1) / kBatchCalls);
  for (double& sample_us : per_call_us) {
    const auto start = Clock::now();
    for (int i = 0; i < kBatchCalls; ++i) call();
    sample_us = microseconds_since(start) / kBatchCalls;
  }
  return per_call_us;
}

// Alternating batches of call and direct (first one or the other, by
// turns); returns each pair's per-call times.
struct PairedBatches {
  std::vector<double> call_us, direct_us, difference_us;
};

PairedBatches time_paired_batches(const Options& options, const std::function<void()>& call,
                                  const std::function<void()>& direct) {
  MPI_Barrier(MPI_COMM_WORLD);
  PairedBatches pairs;
  auto batch_us = [](const std::function<void()>& f) {
    const auto start = Clock::now();
    for (int i = 0; i < kBatchCalls; ++i) f();
    return microseconds_since(start) / kBatchCalls;
  };
  for (int pair = 0; pair < (options.iterations + kBatchCalls - 1) / kBatchCalls; ++pair) {
    double call_us = 0, direct_us = 0;
    if (pair % 2) {
      call_us = batch_us(call);
      direct_us = batch_us(direct);
    } else {
      direct_us = batch_us(direct);
      call_us = batch_us(call);
    }
    pairs.call_us.push_back(call_us);
    pairs.direct_us.push_back(direct_us);
    pairs.difference_us.push_back(call_us - direct_us);
  }
  return pairs;
}

struct Case {
  std::string name;
  size_t bytes;
  std::function<void()> call;    // through MPI_ (Ferry's wrapper under the preload)
  std::function<void()> direct;  // the same call through PMPI_
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  Options options;
  if (!parse_options(argc, argv, options)) {
    if (rank == 0) std::fprintf(stderr, "usage: %s [--iterations N] [--warmup N]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }

  constexpr size_t kSmallCount = 1;                        // one double: 8 bytes
  constexpr size_t kMediumCount = 4096 / sizeof(double);   // 4 KiB
  std::vector<double> send(kMediumCount, 1.0 + rank);
  std::vector<double> receive(kMediumCount, 0.0);

  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  // Point-to-point: with sends through peer memory on (FERRY_PT2PT=peer),
  // Ferry checks every receive on a communicator with peers on the machine.
  auto exchange = [&](bool through_pmpi) {
    MPI_Request requests[2];
    auto irecv = through_pmpi ? PMPI_Irecv : MPI_Irecv;
    auto isend = through_pmpi ? PMPI_Isend : MPI_Isend;
    irecv(receive.data(), kSmallCount, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &requests[0]);
    isend(send.data(), kSmallCount, MPI_DOUBLE, right, 1, MPI_COMM_WORLD, &requests[1]);
    (through_pmpi ? PMPI_Waitall : MPI_Waitall)(2, requests, MPI_STATUSES_IGNORE);
  };
  const std::vector<Case> cases = {
      {"allreduce_sum_double", kSmallCount * sizeof(double),
       [&] { MPI_Allreduce(send.data(), receive.data(), kSmallCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); },
       [&] { PMPI_Allreduce(send.data(), receive.data(), kSmallCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }},
      {"bcast", kSmallCount * sizeof(double),
       [&] { MPI_Bcast(send.data(), kSmallCount, MPI_DOUBLE, 0, MPI_COMM_WORLD); },
       [&] { PMPI_Bcast(send.data(), kSmallCount, MPI_DOUBLE, 0, MPI_COMM_WORLD); }},
      {"allreduce_sum_double", kMediumCount * sizeof(double),
       [&] { MPI_Allreduce(send.data(), receive.data(), kMediumCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); },
       [&] { PMPI_Allreduce(send.data(), receive.data(), kMediumCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }},
      {"sendrecv", kSmallCount * sizeof(double),
       [&] {
         MPI_Sendrecv(send.data(), kSmallCount, MPI_DOUBLE, right, 0, receive.data(), kSmallCount, MPI_DOUBLE, left, 0,
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE);
       },
       [&] {
         PMPI_Sendrecv(send.data(), kSmallCount, MPI_DOUBLE, right, 0, receive.data(), kSmallCount, MPI_DOUBLE, left,
                       0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
       }},
      {"irecv_isend_waitall", kSmallCount * sizeof(double), [&] { exchange(false); }, [&] { exchange(true); }},
  };

  if (rank == 0) {
    std::printf("preload %s\n", ferry_is_loaded() ? "ferry" : "none");
    std::printf("ranks %d iterations %d warmup %d\n", ranks, options.iterations, options.warmup);
  }
  for (const Case& c : cases) {
    const Percentiles each_call = percentiles_of(time_each_call(options, c.call));
    const Percentiles batches = percentiles_of(time_batches(options, c.call));
    if (rank == 0) {
      std::printf("case %-22s bytes %5zu median_us %8.3f p10_us %8.3f p90_us %8.3f batch_median_us %8.4f\n",
                  c.name.c_str(), c.bytes, each_call.median_us, each_call.p10_us, each_call.p90_us,
                  batches.median_us);
    }
    const PairedBatches pairs = time_paired_batches(options, c.call, c.direct);
    const double call_us = percentiles_of(pairs.call_us).median_us;
    const double direct_us = percentiles_of(pairs.direct_us).median_us;
    const double difference_us = percentiles_of(pairs.difference_us).median_us;
    if (rank == 0) {
      std::printf("paired %-22s bytes %5zu mpi_us %8.4f pmpi_us %8.4f difference_ns %6.2f overhead_pct %+6.2f\n",
                  c.name.c_str(), c.bytes, call_us, direct_us, 1000 * difference_us,
                  100 * difference_us / direct_us);
    }
  }
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}
