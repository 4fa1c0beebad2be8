// ferry-bench's command line: the options, the sizes they give and how many
// iterations each size runs. A bad command line throws UsageError, which
// main answers with the usage text and exit status 2.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry_bench_ops.h"

namespace ferry_bench {

constexpr std::size_t kKiB = std::size_t{1} << 10;
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;
constexpr std::size_t kDefaultMaxBytes = kGiB;
// The emulated device copies through host threads: large sizes only take time.
constexpr std::size_t kEmulatedDefaultMaxBytes = 4 * kMiB;

// --help's text, also printed after a usage error.
extern const char* const kUsage;

struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// "4K" for 4096: the largest unit that divides the size, as --sizes takes it.
std::string human_bytes(std::size_t bytes);

struct Options {
  std::vector<Op> ops{kDefaultOps.begin(), kDefaultOps.end()};
  std::vector<std::size_t> sizes;  // --sizes; empty: the x4 series
  std::size_t min_size = 8;
  std::optional<std::size_t> max_size;
  int iters = 100;
  int warmup = 10;
  std::string nccl_path;
  bool nccl_socket = false;  // --nccl-net socket: NCCL over its socket transport alone
  std::string csv_path;
  bool staged = true;
  bool host = false;  // the host mpi column
  int raw_tcp_streams = 0;  // --raw-tcp: connections of the raw TCP measure (0: none)
  bool help = false;
};

Options parse_options(int argc, char** argv);

// --sizes as given, else min, 4 min, 16 min, ... up to and including max.
std::vector<std::size_t> size_series(const Options& options, bool emulated);

struct IterationPlan {
  int warmup;
  int timed;
};

// --iters and --warmup up to 4 MiB; above it fewer in proportion to the size.
IterationPlan plan_for(std::size_t bytes, const Options& options);

}  // namespace ferry_bench
