#include "ferry_bench_options.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <utility>

namespace ferry_bench {

const char* const kUsage =
    "usage: mpirun -np N -x LD_PRELOAD=/path/libferry.so ferry-bench [options]\n"
    "  --ops LIST          allreduce,bcast,alltoallv,sendrecv,isendrecv,psendrecv,send\n"
    "                      (default: the first three);\n"
    "                      sendrecv: every rank sends to the next and receives from the previous;\n"
    "                      isendrecv: the same as MPI_Irecv, MPI_Isend and MPI_Waitall (a halo exchange);\n"
    "                      psendrecv: the same by persistent requests (MPI_Recv_init and MPI_Send_init,\n"
    "                      made once per buffer and size), MPI_Startall and MPI_Waitall;\n"
    "                      send: each even rank sends to the odd rank after it (MPI_Send, MPI_Recv)\n"
    "  --sizes LIST        bytes per rank, e.g. 8,32K,2M,1G (rounded down to whole floats)\n"
    "  --min-size S        first size of the x4 series (default 8)\n"
    "  --max-size S        last size of the x4 series (default 1G; 4M on the emulated device)\n"
    "  --iters N           timed iterations up to 4M; fewer above, at least 5 (default 100)\n"
    "  --warmup N          untimed iterations up to 4M; fewer above (default 10)\n"
    "  --nccl PATH         libnccl.so.2 to use; else libnccl.so.2 on\n"
    "                      the loader's path (pip's NCCL: <site-packages>/nvidia/nccl/lib/libnccl.so.2);\n"
    "                      none: no NCCL column, NCCL not loaded\n"
    "  --nccl-net socket   NCCL over its socket transport alone (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1\n"
    "                      NCCL_NET=Socket): the baseline across nodes; default: NCCL's own choice\n"
    "  --csv FILE          also write the results as CSV\n"
    "  --no-staged         skip the staged (by hand) column\n"
    "  --host              add the host mpi column: the same call on host buffers, no copies\n"
    "  --raw-tcp N         first measure raw TCP between ranks 0 and 1 at every size (N connections\n"
    "                      at once, a thread each; and an 8-byte ping-pong): the socket provider's floor\n"
    "NCCL runs with NCCL_NVLS_ENABLE=0 (NVLink multicast off), set by ferry-bench itself.\n";

std::string human_bytes(std::size_t bytes) {
  for (const auto& [unit, suffix] : {std::pair{kGiB, "G"}, std::pair{kMiB, "M"}, std::pair{kKiB, "K"}})
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  return std::to_string(bytes);
}

namespace {

// Up to this size every --iters/--warmup iteration runs; above it, fewer in
// proportion, so a 1 GiB step of the staged column takes seconds, not minutes.
constexpr std::size_t kFullIterationBytes = 4 * kMiB;
constexpr int kMinTimedIterations = 5;

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    const std::size_t end = std::min(list.find(',', begin), list.size());
    if (end > begin) items.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

std::size_t parse_size(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string suffix = text.substr(digits);
  int shift = -1;
  if (suffix.empty()) shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  if (suffix == "M" || suffix == "m") shift = 20;
  if (suffix == "G" || suffix == "g") shift = 30;
  if (digits == 0 || digits > 12 || shift < 0)
    throw UsageError("not a size: '" + text + "' (examples: 8, 32K, 2M, 1G)");
  // MPI counts are int.
  constexpr std::size_t kMaxBytes = static_cast<std::size_t>(INT_MAX) * sizeof(float);
  const std::size_t value = std::stoull(text.substr(0, digits));
  if (value > (kMaxBytes >> shift)) throw UsageError("size " + text + " is over 8G");
  const std::size_t bytes = value << shift;
  if (bytes < sizeof(float)) throw UsageError("size " + text + " is under one float");
  return bytes;
}

int parse_count(const std::string& option, const std::string& text, int minimum) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < minimum || value > INT_MAX)
    throw UsageError(option + " needs a whole number >= " + std::to_string(minimum) + ", not '" + text + "'");
  return static_cast<int>(value);
}

std::vector<Op> parse_ops(const std::string& list) {
  std::vector<Op> ops;
  for (const std::string& name : split_list(list)) {
    const auto known = std::find_if(kKnownOps.begin(), kKnownOps.end(), [&](Op op) { return name == op_name(op); });
    if (known == kKnownOps.end())
      throw UsageError("unknown operation '" + name + "' (allreduce, bcast, alltoallv, sendrecv, isendrecv, psendrecv, send)");
    ops.push_back(*known);
  }
  if (ops.empty()) throw UsageError("--ops names no operation");
  return ops;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options options;
  bool range_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string option = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(option + " needs a value");
      return argv[++i];
    };
    if (option == "--ops") {
      options.ops = parse_ops(value());
    } else if (option == "--sizes") {
      for (const std::string& size : split_list(value())) options.sizes.push_back(parse_size(size));
      if (options.sizes.empty()) throw UsageError("--sizes names no size");
    } else if (option == "--min-size") {
      options.min_size = parse_size(value());
      range_given = true;
    } else if (option == "--max-size") {
      options.max_size = parse_size(value());
      range_given = true;
    } else if (option == "--iters") {
      options.iters = parse_count(option, value(), 1);
    } else if (option == "--warmup") {
      options.warmup = parse_count(option, value(), 0);
    } else if (option == "--nccl") {
      options.nccl_path = value();
    } else if (option == "--nccl-net") {
      const std::string net = value();
      if (net != "socket") throw UsageError("--nccl-net takes socket, not " + net);
      options.nccl_socket = true;
    } else if (option == "--csv") {
      options.csv_path = value();
    } else if (option == "--no-staged") {
      options.staged = false;
    } else if (option == "--host") {
      options.host = true;
    } else if (option == "--raw-tcp") {
      options.raw_tcp_streams = parse_count(option, value(), 1);
    } else if (option == "--help" || option == "-h") {
      options.help = true;
    } else {
      throw UsageError("unknown option " + option);
    }
  }
  if (!options.sizes.empty() && range_given) throw UsageError("give --sizes or --min-size/--max-size, not both");
  return options;
}

std::vector<std::size_t> size_series(const Options& options, bool emulated) {
  if (!options.sizes.empty()) return options.sizes;
  const std::size_t max = options.max_size.value_or(emulated ? kEmulatedDefaultMaxBytes : kDefaultMaxBytes);
  if (options.min_size > max) throw UsageError("--min-size is above --max-size");
  std::vector<std::size_t> sizes;
  for (std::size_t size = options.min_size; size < max; size *= 4) sizes.push_back(size);
  sizes.push_back(max);
  return sizes;
}

IterationPlan plan_for(std::size_t bytes, const Options& options) {
  const double scale =
      bytes <= kFullIterationBytes ? 1.0 : static_cast<double>(kFullIterationBytes) / static_cast<double>(bytes);
  const int timed = std::min(options.iters, std::max(kMinTimedIterations, static_cast<int>(options.iters * scale)));
  const int warmup = std::min(options.warmup, std::max(1, static_cast<int>(options.warmup * scale)));
  return {warmup, timed};
}

}  // namespace ferry_bench
