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
//                     cannot be timed in the same run as its default one.
// Only rank 0 prints: notes, then one table row per (operation, size).
//
// NCCL is --nccl PATH, else libnccl.so.2 on the loader's path, and runs with
// NCCL_NVLS_ENABLE=0 (NVLink multicast stays off on the shared GPU machine),
// set here before NCCL starts.
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/ferry.h"
#include "ferry_bench_cuda.h"
#ifdef FERRY_BENCH_HAVE_CUDA
#include "ferry_bench_nccl.h"
#endif

namespace ferry_bench {
namespace {

constexpr std::size_t kKiB = std::size_t{1} << 10;
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;
constexpr std::size_t kDefaultMaxBytes = kGiB;
// The emulated device copies through host threads: large sizes only take time.
constexpr std::size_t kEmulatedDefaultMaxBytes = 4 * kMiB;
// Up to this size every --iters/--warmup iteration runs; above it, fewer in
// proportion, so a 1 GiB step of the staged column takes seconds, not minutes.
constexpr std::size_t kFullIterationBytes = 4 * kMiB;
constexpr int kMinTimedIterations = 5;
constexpr int kRoot = 0;
// Outside the range of any correct result: an element left at this value was
// never written.
constexpr float kUntouched = 1e9f;

constexpr const char* kUsage =
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
    "  --csv FILE          also write the results as CSV\n"
    "  --no-staged         skip the staged (by hand) column\n"
    "NCCL runs with NCCL_NVLS_ENABLE=0 (NVLink multicast off), set by ferry-bench itself.\n";

struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

enum class Op { kAllreduce, kBcast, kAlltoallv, kSendrecv, kIsendrecv, kPsendrecv, kSend };
constexpr std::array<Op, 3> kDefaultOps{Op::kAllreduce, Op::kBcast, Op::kAlltoallv};
constexpr std::array<Op, 7> kKnownOps{Op::kAllreduce,  Op::kBcast,      Op::kAlltoallv, Op::kSendrecv,
                                      Op::kIsendrecv, Op::kPsendrecv, Op::kSend};

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllreduce: return "allreduce";
    case Op::kBcast: return "bcast";
    case Op::kAlltoallv: return "alltoallv";
    case Op::kSendrecv: return "sendrecv";
    case Op::kIsendrecv: return "isendrecv";
    case Op::kPsendrecv: return "psendrecv";
    case Op::kSend: return "send";
  }
  return "?";
}

// Bus bandwidth / algorithm bandwidth, as nccl-tests defines them.
double busbw_factor(Op op, int nranks) {
  switch (op) {
    case Op::kAllreduce: return 2.0 * (nranks - 1) / nranks;
    case Op::kBcast: return 1.0;
    case Op::kAlltoallv: return static_cast<double>(nranks - 1) / nranks;
    case Op::kSendrecv: return 1.0;
    case Op::kIsendrecv: return 1.0;
    case Op::kPsendrecv: return 1.0;
    case Op::kSend: return 1.0;
  }
  return 0;
}

std::string human_bytes(std::size_t bytes) {
  for (const auto& [unit, suffix] : {std::pair{kGiB, "G"}, std::pair{kMiB, "M"}, std::pair{kKiB, "K"}})
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  return std::to_string(bytes);
}

// ---- options -------------------------------------------------------------

struct Options {
  std::vector<Op> ops{kDefaultOps.begin(), kDefaultOps.end()};
  std::vector<std::size_t> sizes;  // --sizes; empty: the x4 series
  std::size_t min_size = 8;
  std::optional<std::size_t> max_size;
  int iters = 100;
  int warmup = 10;
  std::string nccl_path;
  std::string csv_path;
  bool staged = true;
  bool help = false;
};

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
    } else if (option == "--csv") {
      options.csv_path = value();
    } else if (option == "--no-staged") {
      options.staged = false;
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

struct IterationPlan {
  int warmup;
  int timed;
};

IterationPlan plan_for(std::size_t bytes, const Options& options) {
  const double scale =
      bytes <= kFullIterationBytes ? 1.0 : static_cast<double>(kFullIterationBytes) / static_cast<double>(bytes);
  const int timed = std::min(options.iters, std::max(kMinTimedIterations, static_cast<int>(options.iters * scale)));
  const int warmup = std::min(options.warmup, std::max(1, static_cast<int>(options.warmup * scale)));
  return {warmup, timed};
}

// ---- Ferry's C API and memory ----------------------------------------------

// Found in the preloaded libferry.so: the binary links only MPI.
struct FerryApi {
  decltype(&ferry_device_malloc) device_malloc;
  decltype(&ferry_device_free) device_free;
  decltype(&ferry_memcpy) copy;
  decltype(&ferry_device_backend) backend;
};

template <typename Function>
Function find_symbol(const char* name) {
  void* symbol = dlsym(RTLD_DEFAULT, name);
  if (!symbol) throw std::runtime_error("libferry.so is not loaded: run under mpirun -x LD_PRELOAD=/path/libferry.so");
  Function function;
  std::memcpy(&function, &symbol, sizeof symbol);  // POSIX: dlsym may give a function
  return function;
}

FerryApi find_ferry() {
  return {find_symbol<decltype(&ferry_device_malloc)>("ferry_device_malloc"),
          find_symbol<decltype(&ferry_device_free)>("ferry_device_free"),
          find_symbol<decltype(&ferry_memcpy)>("ferry_memcpy"),
          find_symbol<decltype(&ferry_device_backend)>("ferry_device_backend")};
}

using CopyFunction = int (*)(void* dst, const void* src, std::size_t bytes);

void copy_or_throw(CopyFunction copy, void* dst, const void* src, std::size_t bytes) {
  if (copy(dst, src, bytes) != 0) throw std::runtime_error("copy of " + human_bytes(bytes) + " bytes failed");
}

// Device memory from libferry.so: cudaMalloc on a GPU, emulated device memory
// otherwise. Host code never dereferences it.
class DeviceBuffer {
 public:
  DeviceBuffer(const FerryApi& ferry, std::size_t bytes)
      : ferry_(ferry), ptr_(static_cast<float*>(ferry.device_malloc(bytes))) {
    if (!ptr_) throw std::runtime_error("ferry_device_malloc(" + human_bytes(bytes) + ") failed");
  }
  ~DeviceBuffer() { ferry_.device_free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return ptr_; }

 private:
  const FerryApi& ferry_;
  float* ptr_;
};

// Host side of hand-written staging: pinned on a GPU, as a careful user would
// have it; plain memory for the emulated device.
class HostBuffer {
 public:
  HostBuffer(std::size_t bytes, bool pinned)
      : pinned_(pinned), ptr_(pinned ? cuda::pinned_alloc(bytes) : std::malloc(bytes)) {
    if (!ptr_) throw std::runtime_error("host allocation of " + human_bytes(bytes) + " failed");
  }
  ~HostBuffer() { pinned_ ? cuda::pinned_free(ptr_) : std::free(ptr_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  bool pinned_;
  void* ptr_;
};

struct Buffers {
  float* send;
  float* recv;
};

// ---- one (operation, size) ----------------------------------------------

struct Case {
  Op op;
  std::size_t count;                // floats in each rank's buffer; alltoallv: the whole send buffer
  std::vector<int> counts, displs;  // alltoallv: one equal block per peer
  std::uint64_t seed;               // for the input data
  std::size_t bytes() const { return count * sizeof(float); }
};

// None when the size gives alltoallv less than one float per peer.
std::optional<Case> make_case(Op op, std::size_t bytes, int nranks, std::uint64_t seed) {
  Case c{op, bytes / sizeof(float), {}, {}, seed};
  if (op == Op::kAlltoallv) {
    const std::size_t block = c.count / nranks;
    if (block == 0) return std::nullopt;
    c.count = block * nranks;
    for (int peer = 0; peer < nranks; ++peer) {
      c.counts.push_back(static_cast<int>(block));
      c.displs.push_back(static_cast<int>(block * peer));
    }
  }
  return c;
}

// Small integers stored in floats: every sum over ranks is exact, so results
// compare bit for bit. Any rank can compute any rank's data.
float input_value(std::uint64_t seed, int rank, std::size_t index) {
  // splitmix64's mixing of one word made from (seed, rank, index).
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + (static_cast<std::uint64_t>(rank) << 40) + index;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<int>(z % 1024) - 512);
}

void check_mpi(int result, const char* what) {
  if (result == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(result, text, &length);
  throw std::runtime_error(std::string(what) + " failed: " + text);
}

// The ranks a sendrecv sends to and receives from.
int next_rank(int rank, int nranks) { return (rank + 1) % nranks; }
int previous_rank(int rank, int nranks) { return (rank + nranks - 1) % nranks; }
// A send's partner: the odd rank after an even one, and back; none for the
// last rank of an odd count.
int send_partner(int rank, int nranks) {
  const int partner = rank % 2 ? rank - 1 : rank + 1;
  return partner < nranks ? partner : MPI_PROC_NULL;
}

// psendrecv's persistent requests, made at the first call on a pair of
// buffers and a count and kept to the end of the run.
struct PersistentExchange {
  float* send;
  float* recv;
  int count;
  MPI_Request requests[2];
};

MPI_Request* persistent_exchange(float* send, float* recv, int count) {
  static std::vector<std::unique_ptr<PersistentExchange>> made;
  for (const auto& e : made)
    if (e->send == send && e->recv == recv && e->count == count) return e->requests;
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  auto e = std::make_unique<PersistentExchange>(PersistentExchange{send, recv, count, {}});
  check_mpi(MPI_Recv_init(recv, count, MPI_FLOAT, previous_rank(rank, nranks), 0, MPI_COMM_WORLD, &e->requests[0]),
            "MPI_Recv_init");
  check_mpi(MPI_Send_init(send, count, MPI_FLOAT, next_rank(rank, nranks), 0, MPI_COMM_WORLD, &e->requests[1]),
            "MPI_Send_init");
  made.push_back(std::move(e));
  return made.back()->requests;
}

// Allreduce, alltoallv and sendrecv from send to recv; bcast in place in send.
void run_mpi(const Case& c, float* send, float* recv) {
  const int count = static_cast<int>(c.count);
  switch (c.op) {
    case Op::kAllreduce:
      check_mpi(MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
      break;
    case Op::kBcast: check_mpi(MPI_Bcast(send, count, MPI_FLOAT, kRoot, MPI_COMM_WORLD), "MPI_Bcast"); break;
    case Op::kAlltoallv:
      check_mpi(MPI_Alltoallv(send, c.counts.data(), c.displs.data(), MPI_FLOAT, recv, c.counts.data(), c.displs.data(),
                              MPI_FLOAT, MPI_COMM_WORLD),
                "MPI_Alltoallv");
      break;
    case Op::kSendrecv: {
      int rank = 0, nranks = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &nranks);
      check_mpi(MPI_Sendrecv(send, count, MPI_FLOAT, next_rank(rank, nranks), 0, recv, count, MPI_FLOAT,
                             previous_rank(rank, nranks), 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                "MPI_Sendrecv");
      break;
    }
    case Op::kIsendrecv: {
      int rank = 0, nranks = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &nranks);
      MPI_Request requests[2];
      check_mpi(MPI_Irecv(recv, count, MPI_FLOAT, previous_rank(rank, nranks), 0, MPI_COMM_WORLD, &requests[0]),
                "MPI_Irecv");
      check_mpi(MPI_Isend(send, count, MPI_FLOAT, next_rank(rank, nranks), 0, MPI_COMM_WORLD, &requests[1]),
                "MPI_Isend");
      check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
      break;
    }
    case Op::kPsendrecv: {
      MPI_Request* requests = persistent_exchange(send, recv, count);
      check_mpi(MPI_Startall(2, requests), "MPI_Startall");
      check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
      break;
    }
    case Op::kSend: {
      int rank = 0, nranks = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &nranks);
      if (rank % 2 == 0) {
        check_mpi(MPI_Send(send, count, MPI_FLOAT, send_partner(rank, nranks), 0, MPI_COMM_WORLD), "MPI_Send");
      } else {
        check_mpi(MPI_Recv(recv, count, MPI_FLOAT, send_partner(rank, nranks), 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv");
      }
      break;
    }
  }
}

// ---- the three columns ----------------------------------------------------

enum MethodId { kFerry, kNccl, kStaged, kMethodCount };
constexpr std::array<const char*, kMethodCount> kMethodTitles{"ferry", "nccl", "staged (by hand)"};

class Method {
 public:
  virtual ~Method() = default;
  // Runs the operation on the device buffers. An MPI call has completed on
  // return; NCCL work is only queued.
  virtual void start(const Case& c) = 0;
  // Waits for what start() queued.
  virtual void finish() {}
  // The stream on which CUDA events time start(); none where only the host
  // clock means anything.
  virtual std::optional<cuda::Stream> event_stream() const { return std::nullopt; }
};

// The plain MPI call on device buffers: Ferry intercepts it.
class FerryMethod final : public Method {
 public:
  FerryMethod(Buffers device, bool gpu_events) : device_(device), gpu_events_(gpu_events) {}
  void start(const Case& c) override { run_mpi(c, device_.send, device_.recv); }
  std::optional<cuda::Stream> event_stream() const override {
    if (!gpu_events_) return std::nullopt;
    return cuda::legacy_stream();
  }

 private:
  Buffers device_;
  bool gpu_events_;
};

// Host staging as written by hand: Ferry sees only host buffers and passes
// the MPI call through. Not timed with events: it is host-driven throughout.
class StagedMethod final : public Method {
 public:
  StagedMethod(Buffers device, Buffers host, CopyFunction copy, int rank)
      : device_(device), host_(host), copy_(copy), rank_(rank) {}

  void start(const Case& c) override {
    const std::size_t bytes = c.bytes();
    if (c.op == Op::kBcast) {
      if (rank_ == kRoot) copy_or_throw(copy_, host_.send, device_.send, bytes);
      run_mpi(c, host_.send, host_.recv);
      if (rank_ != kRoot) copy_or_throw(copy_, device_.send, host_.send, bytes);
      return;
    }
    if (c.op == Op::kSend) {
      const bool sends = rank_ % 2 == 0;
      if (sends) copy_or_throw(copy_, host_.send, device_.send, bytes);
      run_mpi(c, host_.send, host_.recv);
      if (!sends) copy_or_throw(copy_, device_.recv, host_.recv, bytes);
      return;
    }
    copy_or_throw(copy_, host_.send, device_.send, bytes);
    run_mpi(c, host_.send, host_.recv);
    copy_or_throw(copy_, device_.recv, host_.recv, bytes);
  }

 private:
  Buffers device_;
  Buffers host_;
  CopyFunction copy_;
  int rank_;
};

#ifdef FERRY_BENCH_HAVE_CUDA
class NcclMethod final : public Method {
 public:
  NcclMethod(const nccl::Api& api, nccl::Comm comm, cuda::Stream stream, Buffers device, int nranks)
      : api_(api), comm_(comm), stream_(stream), device_(device), nranks_(nranks) {}
  ~NcclMethod() override {
    api_.comm_destroy(comm_);
    cuda::destroy_stream(stream_);
  }
  NcclMethod(const NcclMethod&) = delete;
  NcclMethod& operator=(const NcclMethod&) = delete;

  void start(const Case& c) override {
    switch (c.op) {
      case Op::kAllreduce:
        check(api_.all_reduce(device_.send, device_.recv, c.count, nccl::kFloat32, nccl::kSum, comm_, stream_),
              "ncclAllReduce");
        break;
      case Op::kBcast:
        check(api_.broadcast(device_.send, device_.send, c.count, nccl::kFloat32, kRoot, comm_, stream_),
              "ncclBroadcast");
        break;
      case Op::kAlltoallv:
        check(api_.group_start(), "ncclGroupStart");
        for (int peer = 0; peer < nranks_; ++peer) {
          check(api_.send(device_.send + c.displs[peer], c.counts[peer], nccl::kFloat32, peer, comm_, stream_),
                "ncclSend");
          check(api_.recv(device_.recv + c.displs[peer], c.counts[peer], nccl::kFloat32, peer, comm_, stream_),
                "ncclRecv");
        }
        check(api_.group_end(), "ncclGroupEnd");
        break;
      case Op::kSendrecv:
      case Op::kIsendrecv:
      case Op::kPsendrecv: {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        check(api_.group_start(), "ncclGroupStart");
        check(api_.send(device_.send, c.count, nccl::kFloat32, next_rank(rank, nranks_), comm_, stream_), "ncclSend");
        check(api_.recv(device_.recv, c.count, nccl::kFloat32, previous_rank(rank, nranks_), comm_, stream_),
              "ncclRecv");
        check(api_.group_end(), "ncclGroupEnd");
        break;
      }
      case Op::kSend: {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        const int partner = send_partner(rank, nranks_);
        if (partner == MPI_PROC_NULL) break;
        if (rank % 2 == 0) {
          check(api_.send(device_.send, c.count, nccl::kFloat32, partner, comm_, stream_), "ncclSend");
        } else {
          check(api_.recv(device_.recv, c.count, nccl::kFloat32, partner, comm_, stream_), "ncclRecv");
        }
        break;
      }
    }
  }
  void finish() override { cuda::synchronize(stream_); }
  std::optional<cuda::Stream> event_stream() const override { return stream_; }

 private:
  void check(nccl::Result result, const char* what) const {
    if (result != nccl::kSuccess) throw std::runtime_error(std::string(what) + ": " + api_.get_error_string(result));
  }

  nccl::Api api_;
  nccl::Comm comm_;
  cuda::Stream stream_;
  Buffers device_;
  int nranks_;
};

// Every rank loads NCCL and joins one communicator over MPI_COMM_WORLD, or
// none does; *note says which NCCL, or why there is none.
std::unique_ptr<Method> start_nccl(const Options& options, Buffers device, int rank, int nranks, std::string* note) {
  // NVLink multicast stays off on the shared GPU machine; NCCL reads this at
  // init, and it overrides whatever the caller's environment said.
  setenv("NCCL_NVLS_ENABLE", "0", 1);

  std::vector<std::string> candidates;
  if (!options.nccl_path.empty()) candidates.push_back(options.nccl_path);
  candidates.push_back("libnccl.so.2");
  nccl::Library library;
  std::string why;
  int loaded = nccl::load(candidates, &library, &why) ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &loaded, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  if (!loaded) {
    *note = "nccl column skipped: " + (why.empty() ? "NCCL did not load on every rank" : why);
    return nullptr;
  }
  const nccl::Api& api = library.api;

  struct {
    nccl::Result result;
    nccl::UniqueId id;
  } unique{};
  if (rank == kRoot) unique.result = api.get_unique_id(&unique.id);
  check_mpi(MPI_Bcast(&unique, sizeof unique, MPI_BYTE, kRoot, MPI_COMM_WORLD), "MPI_Bcast");
  if (unique.result != nccl::kSuccess) {
    *note = std::string("nccl column skipped: ncclGetUniqueId: ") + api.get_error_string(unique.result);
    return nullptr;
  }

  const cuda::Stream stream = cuda::create_stream();
  nccl::Comm comm = nullptr;
  const nccl::Result result = api.comm_init_rank(&comm, nranks, unique.id, rank);
  int joined = result == nccl::kSuccess ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &joined, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  if (!joined) {
    if (result == nccl::kSuccess) api.comm_destroy(comm);
    cuda::destroy_stream(stream);
    *note = std::string("nccl column skipped: ncclCommInitRank: ") +
            (result == nccl::kSuccess ? "failed on another rank" : api.get_error_string(result));
    return nullptr;
  }

  int version = 0;
  api.get_version(&version);
  *note = "nccl: NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
          std::to_string(version % 100) + " from " + library.path + ", NCCL_NVLS_ENABLE=0";
  return std::make_unique<NcclMethod>(api, comm, stream, device, nranks);
}
#endif

// ---- checking ---------------------------------------------------------------

// Device buffers sized for the largest case, with the host reference for the
// case at hand.
class Harness {
 public:
  Harness(const FerryApi& ferry, std::size_t max_count, int rank, int nranks)
      : ferry_(ferry),
        send_(ferry, max_count * sizeof(float)),
        recv_(ferry, max_count * sizeof(float)),
        rank_(rank),
        nranks_(nranks) {
    input_.reserve(max_count);
    expected_.reserve(max_count);
    readback_.reserve(max_count);
  }

  Buffers device() const { return {send_.get(), recv_.get()}; }

  // This rank's input for `c`, and the result it must end with.
  void prepare(const Case& c) {
    input_.resize(c.count);
    expected_.resize(c.count);
    readback_.resize(c.count);
    switch (c.op) {
      case Op::kAllreduce:
        for (std::size_t i = 0; i < c.count; ++i) input_[i] = input_value(c.seed, rank_, i);
        std::fill(expected_.begin(), expected_.end(), 0.0f);
        for (int r = 0; r < nranks_; ++r)
          for (std::size_t i = 0; i < c.count; ++i) expected_[i] += input_value(c.seed, r, i);
        break;
      case Op::kBcast:
        for (std::size_t i = 0; i < c.count; ++i) {
          expected_[i] = input_value(c.seed, kRoot, i);
          input_[i] = rank_ == kRoot ? expected_[i] : kUntouched;
        }
        break;
      case Op::kAlltoallv: {
        const std::size_t block = c.count / nranks_;
        for (std::size_t i = 0; i < c.count; ++i) input_[i] = input_value(c.seed, rank_, i);
        // Block `peer` of the result is block `rank_` of the peer's input.
        for (int peer = 0; peer < nranks_; ++peer)
          for (std::size_t k = 0; k < block; ++k)
            expected_[peer * block + k] = input_value(c.seed, peer, rank_ * block + k);
        break;
      }
      case Op::kSendrecv:
      case Op::kIsendrecv:
      case Op::kPsendrecv: {
        const int from = previous_rank(rank_, nranks_);
        for (std::size_t i = 0; i < c.count; ++i) {
          input_[i] = input_value(c.seed, rank_, i);
          expected_[i] = input_value(c.seed, from, i);
        }
        break;
      }
      case Op::kSend: {
        // Senders' receive buffers stay as they were.
        const int from = send_partner(rank_, nranks_);
        const bool receives = rank_ % 2 == 1;
        for (std::size_t i = 0; i < c.count; ++i) {
          input_[i] = input_value(c.seed, rank_, i);
          expected_[i] = receives ? input_value(c.seed, from, i) : kUntouched;
        }
        break;
      }
    }
  }

  // Runs `method` once on fresh inputs and compares every element with the
  // reference; wrong data on any rank ends the run.
  void verify(Method& method, const char* method_title, const Case& c) {
    const std::size_t bytes = c.bytes();
    float* result = c.op == Op::kBcast ? send_.get() : recv_.get();
    copy_or_throw(ferry_.copy, send_.get(), input_.data(), bytes);
    if (result != send_.get()) {
      std::fill(readback_.begin(), readback_.end(), kUntouched);
      copy_or_throw(ferry_.copy, result, readback_.data(), bytes);
    }
    method.start(c);
    method.finish();
    copy_or_throw(ferry_.copy, readback_.data(), result, bytes);

    std::size_t wrong = 0, first_wrong = 0;
    for (std::size_t i = 0; i < c.count; ++i) {
      if (readback_[i] == expected_[i]) continue;
      if (wrong == 0) first_wrong = i;
      ++wrong;
    }
    unsigned long long wrong_anywhere = wrong;
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &wrong_anywhere, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD),
              "MPI_Allreduce");
    if (wrong_anywhere == 0) return;
    char message[512];
    if (wrong == 0) {
      std::snprintf(message, sizeof message, "%s %s of %s bytes: wrong results on another rank", method_title,
                    op_name(c.op), human_bytes(bytes).c_str());
    } else {
      std::snprintf(message, sizeof message,
                    "%s %s of %s bytes: WRONG RESULT, %zu of %zu floats differ from the host reference; "
                    "first at index %zu: got %.1f, expected %.1f",
                    method_title, op_name(c.op), human_bytes(bytes).c_str(), wrong, c.count, first_wrong,
                    readback_[first_wrong], expected_[first_wrong]);
    }
    throw std::runtime_error(message);
  }

 private:
  const FerryApi& ferry_;
  DeviceBuffer send_, recv_;
  int rank_, nranks_;
  std::vector<float> input_, expected_, readback_;
};

// ---- timing -------------------------------------------------------------------

struct Timing {
  double blocking_us;            // host wall clock around the blocking call
  std::optional<double> gpu_us;  // CUDA events around the operation
};

// Each iteration counts as long as its slowest rank took.
double median_of_slowest(std::vector<double>* samples) {
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, samples->data(), static_cast<int>(samples->size()), MPI_DOUBLE, MPI_MAX,
                          MPI_COMM_WORLD),
            "MPI_Allreduce");
  std::sort(samples->begin(), samples->end());
  const std::size_t n = samples->size();
  return n % 2 ? (*samples)[n / 2] : ((*samples)[n / 2 - 1] + (*samples)[n / 2]) / 2;
}

// Every timed iteration starts from a barrier, so ranks enter together.
Timing measure(Method& method, const Case& c, const IterationPlan& plan, cuda::EventTimer* timer) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < plan.warmup; ++i) {
    method.start(c);
    method.finish();
  }
  std::vector<double> blocking_us(plan.timed);
  for (double& sample : blocking_us) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    const Clock::time_point begin = Clock::now();
    method.start(c);
    method.finish();
    sample = std::chrono::duration<double, std::micro>(Clock::now() - begin).count();
  }
  Timing timing{median_of_slowest(&blocking_us), std::nullopt};

  const std::optional<cuda::Stream> stream = method.event_stream();
  if (!timer || !stream) return timing;
  // A pass of its own: recording events inside the host-clock window would
  // add their cost to the blocking time.
  std::vector<double> gpu_us(plan.timed);
  for (double& sample : gpu_us) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    timer->start(*stream);
    method.start(c);
    timer->stop(*stream);
    method.finish();
    sample = timer->elapsed_us();
  }
  timing.gpu_us = median_of_slowest(&gpu_us);
  return timing;
}

// ---- output -------------------------------------------------------------------

struct Row {
  Op op;
  std::size_t bytes;
  int timed_iterations;
  std::array<std::optional<Timing>, kMethodCount> timings;
};

double busbw_gbps(const Row& row, double us, int nranks) {
  return static_cast<double>(row.bytes) / us / 1e3 * busbw_factor(row.op, nranks);
}

std::string format_number(const char* format, double value) {
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// The table on rank 0: one group of columns per method that runs, then the
// ferry/nccl time ratio when both ran.
class Table {
 public:
  Table(const std::array<bool, kMethodCount>& runs, const std::array<bool, kMethodCount>& gpu_timed, int nranks)
      : runs_(runs), gpu_timed_(gpu_timed), nranks_(nranks) {}

  void print_header() const {
    std::string banners(kOpWidth + kBytesWidth, ' ');
    std::string titles = pad_right("op", kOpWidth) + pad_left("bytes", kBytesWidth);
    for (int m = 0; m < kMethodCount; ++m) {
      if (!runs_[m]) continue;
      const int columns = gpu_timed_[m] ? 3 : 2;
      banners += banner(kMethodTitles[m], columns * kNumberWidth);
      titles += pad_left("us", kNumberWidth);
      if (gpu_timed_[m]) titles += pad_left("gpu us", kNumberWidth);
      titles += pad_left("busbw", kNumberWidth);
    }
    if (with_ratio()) titles += pad_left("ferry/nccl", kRatioWidth);
    banners.erase(banners.find_last_not_of(' ') + 1);
    std::printf("%s\n%s\n", banners.c_str(), titles.c_str());
    std::fflush(stdout);
  }

  void print_row(const Row& row) const {
    std::string line = pad_right(op_name(row.op), kOpWidth) + pad_left(human_bytes(row.bytes), kBytesWidth);
    for (int m = 0; m < kMethodCount; ++m) {
      if (!runs_[m]) continue;
      const Timing& timing = *row.timings[m];
      line += pad_left(format_number("%.1f", timing.blocking_us), kNumberWidth);
      if (gpu_timed_[m]) line += pad_left(format_number("%.1f", *timing.gpu_us), kNumberWidth);
      line += pad_left(format_number("%.2f", busbw_gbps(row, timing.blocking_us, nranks_)), kNumberWidth);
    }
    if (with_ratio())
      line += pad_left(format_number("%.2f", row.timings[kFerry]->blocking_us / row.timings[kNccl]->blocking_us),
                       kRatioWidth);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

 private:
  static constexpr int kOpWidth = 10;
  static constexpr int kBytesWidth = 6;
  static constexpr int kNumberWidth = 10;
  static constexpr int kRatioWidth = 12;

  static std::string pad_left(const std::string& text, int width) {
    return std::string(std::max(0, width - static_cast<int>(text.size())), ' ') + text;
  }
  static std::string pad_right(const std::string& text, int width) {
    return text + std::string(std::max(0, width - static_cast<int>(text.size())), ' ');
  }
  // "  ---- title ----" over a group `width` characters wide.
  static std::string banner(const std::string& title, int width) {
    const int inner = width - 2;
    const std::string text = " " + title + " ";
    const int dashes = std::max(0, inner - static_cast<int>(text.size()));
    return "  " + std::string(dashes / 2, '-') + text + std::string(dashes - dashes / 2, '-');
  }
  bool with_ratio() const { return runs_[kFerry] && runs_[kNccl]; }

  std::array<bool, kMethodCount> runs_;
  std::array<bool, kMethodCount> gpu_timed_;
  int nranks_;
};

// Fixed columns, empty where a method did not run, so runs compare by script.
class CsvFile {
 public:
  CsvFile(const std::string& path, int nranks) : file_(std::fopen(path.c_str(), "w")), nranks_(nranks) {
    if (!file_) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
    std::fprintf(file_,
                 "op,bytes,ranks,iterations,ferry_us,ferry_gpu_us,ferry_busbw_gbps,nccl_us,nccl_gpu_us,"
                 "nccl_busbw_gbps,staged_by_hand_us,staged_by_hand_busbw_gbps,ferry_over_nccl\n");
  }
  ~CsvFile() { std::fclose(file_); }
  CsvFile(const CsvFile&) = delete;
  CsvFile& operator=(const CsvFile&) = delete;

  void write_row(const Row& row) {
    std::string line = std::string(op_name(row.op)) + "," + std::to_string(row.bytes) + "," + std::to_string(nranks_) +
                       "," + std::to_string(row.timed_iterations);
    for (int m = 0; m < kMethodCount; ++m) {
      const std::optional<Timing>& timing = row.timings[m];
      line += "," + (timing ? format_number("%.3f", timing->blocking_us) : "");
      if (m != kStaged) line += "," + (timing && timing->gpu_us ? format_number("%.3f", *timing->gpu_us) : "");
      line += "," + (timing ? format_number("%.3f", busbw_gbps(row, timing->blocking_us, nranks_)) : "");
    }
    const bool ratio = row.timings[kFerry] && row.timings[kNccl];
    line +=
        "," + (ratio ? format_number("%.4f", row.timings[kFerry]->blocking_us / row.timings[kNccl]->blocking_us) : "");
    std::fprintf(file_, "%s\n", line.c_str());
    std::fflush(file_);
  }

 private:
  std::FILE* file_;
  int nranks_;
};

// ---- the run --------------------------------------------------------------------

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

  std::string nccl_note = use_cuda ? "" : "nccl column skipped: no GPU in use (device backend " + backend + ")";
#ifdef FERRY_BENCH_HAVE_CUDA
  if (use_cuda && options.nccl_path == "none") nccl_note = "nccl column skipped: --nccl none";
  if (use_cuda && options.nccl_path != "none") methods[kNccl] = start_nccl(options, device, rank, nranks, &nccl_note);
#endif
  if (!nccl_note.empty()) notes.push_back(nccl_note);

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
