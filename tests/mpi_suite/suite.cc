#include "suite.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace suite {
namespace {

int g_rank = 0;
int g_size = 1;
uint64_t g_next_case_id = 1;
long g_failures = 0;

// Enough failure lines to diagnose; the count still covers all of them.
constexpr long kMaxReportedFailures = 20;

constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xC3;

std::string describe(const Case& what) {
  std::ostringstream text;
  text << what.call;
  if (!what.type.empty()) text << " type=" << what.type;
  if (!what.op.empty()) text << " op=" << what.op;
  text << " count=" << what.count;
  if (!what.layout.empty()) text << " layout=" << what.layout;
  if (!what.detail.empty()) text << " " << what.detail;
  text << " rank=" << g_rank << "/" << g_size;
  return text.str();
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

void init(int* argc, char*** argv) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  suite_device_init();
}

bool mpi_library_is(const char* name) { return suite_mpi_library_is(name) != 0; }

bool mpich_4() {
  static const bool is = mpi_library_is("MPICH Version:\t4.");
  return is;
}

int finish() {
  long total_failures = 0;
  MPI_Allreduce(&g_failures, &total_failures, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) {
    if (total_failures == 0) {
      std::printf("No Errors\n");
    } else {
      std::fprintf(stderr, "Found %ld errors (device buffers: %s)\n", total_failures,
                   suite_device_backend());
    }
    std::fflush(stdout);
    std::fflush(stderr);
  }
  MPI_Finalize();
  return total_failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

int world_rank() { return g_rank; }
int world_size() { return g_size; }
uint64_t next_case_id() { return g_next_case_id++; }

void fail(const Case& what, const std::string& problem) {
  if (g_failures++ < kMaxReportedFailures) {
    std::fprintf(stderr, "FAIL %s: %s\n", describe(what).c_str(), problem.c_str());
    std::fflush(stderr);
  }
}

void expect(bool ok, const Case& what, const std::string& problem) {
  if (!ok) fail(what, problem);
}

void check_mpi(int rc, const Case& what) {
  if (rc == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, message, &length);
  std::fprintf(stderr, "FAIL %s: returned %d (%s)\n", describe(what).c_str(), rc, message);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void expect_status(const Case& what, const MPI_Status& status, MPI_Datatype type, int count,
                   int source, int tag) {
  int got_count = -1;
  MPI_Get_count(&status, type, &got_count);
  expect(got_count == count, what,
         "MPI_Get_count: expected " + std::to_string(count) + " got " + std::to_string(got_count));
  expect(status.MPI_SOURCE == source, what,
         "status.MPI_SOURCE: expected " + std::to_string(source) + " got " +
             std::to_string(status.MPI_SOURCE));
  expect(
      status.MPI_TAG == tag, what,
      "status.MPI_TAG: expected " + std::to_string(tag) + " got " + std::to_string(status.MPI_TAG));
}

Pair pair_for(uint64_t case_id) {
  const int index = int(case_id % uint64_t(g_size * (g_size - 1)));
  const int source = index / (g_size - 1);
  return {source, (source + 1 + index % (g_size - 1)) % g_size};
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::device:
      return "device";
    case Layout::offset:
      return "offset";
    case Layout::in_place:
      return "in_place";
    case Layout::mixed_ranks:
      return "mixed_ranks";
    case Layout::mixed_sides:
      return "mixed_sides";
  }
  return "?";
}

Memory send_memory(Layout layout, int rank) {
  switch (layout) {
    case Layout::mixed_ranks:
      return rank % 2 ? Memory::host : Memory::device;
    case Layout::mixed_sides:
      return rank % 2 ? Memory::device : Memory::host;
    default:
      return Memory::device;
  }
}

Memory recv_memory(Layout layout, int rank) {
  switch (layout) {
    case Layout::mixed_ranks:
      return rank % 2 ? Memory::host : Memory::device;
    case Layout::mixed_sides:
      return rank % 2 ? Memory::host : Memory::device;
    default:
      return Memory::device;
  }
}

size_t offset_bytes(Layout layout, size_t element_size, uint64_t case_id) {
  if (layout != Layout::offset) return 0;
  return element_size == 1 ? 1 + case_id % 7 : element_size;
}

std::mt19937_64 seeded_rng(uint64_t case_id, int rank) {
  return std::mt19937_64(splitmix64(case_id * 1000003u + uint64_t(rank)));
}

std::vector<int> uneven_counts(long count, int ranks) {
  std::vector<int> counts(ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    counts[rank] = count == 0 || rank == 1 ? 0 : int(count) + rank;
  }
  return counts;
}

Buffer::Buffer(size_t bytes, Memory memory, size_t offset)
    : base_(nullptr), offset_(offset), bytes_(bytes), memory_(memory) {
  const size_t total = offset + bytes + kGuardBytes;
  base_ = static_cast<char*>(memory == Memory::device ? suite_device_malloc(total)
                                                      : std::malloc(total));
  if (base_ == nullptr) {
    std::fprintf(stderr, "mpi_suite: host allocation of %zu bytes failed\n", total);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const std::vector<unsigned char> guard(total, kGuardByte);
  suite_memcpy(base_, guard.data(), total);
}

Buffer::Buffer(Buffer&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      offset_(other.offset_),
      bytes_(other.bytes_),
      memory_(other.memory_) {}

Buffer::~Buffer() {
  if (base_ == nullptr) return;
  if (memory_ == Memory::device) {
    suite_device_free(base_);
  } else {
    std::free(base_);
  }
}

void Buffer::write(const void* src, size_t bytes) { suite_memcpy(base_ + offset_, src, bytes); }

void Buffer::read(void* dst, size_t bytes) const { suite_memcpy(dst, base_ + offset_, bytes); }

bool Buffer::guards_intact() const {
  std::vector<unsigned char> before(offset_);
  std::vector<unsigned char> after(kGuardBytes);
  suite_memcpy(before.data(), base_, offset_);
  suite_memcpy(after.data(), base_ + offset_ + bytes_, kGuardBytes);
  for (unsigned char byte : before) {
    if (byte != kGuardByte) return false;
  }
  for (unsigned char byte : after) {
    if (byte != kGuardByte) return false;
  }
  return true;
}

}  // namespace suite
