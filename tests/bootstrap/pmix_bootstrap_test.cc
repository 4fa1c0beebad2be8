// The PMIx bootstrap under mpirun, without MPI in the process: mpirun is the
// PMIx server of its ranks. Each rank checks its identity against Open MPI's
// environment, then allgathers of several sizes and barriers; rank 0 prints
// "No Errors" when every rank passed (checked through one more allgather).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/bootstrap/pmix_bootstrap.h"

namespace {

int errors = 0;

#define EXPECT(cond, ...)                                        \
  do {                                                           \
    if (!(cond)) {                                               \
      ++errors;                                                  \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                         \
      std::fprintf(stderr, "\n");                                \
    }                                                            \
  } while (0)

int env_int(const char* name) {
  const char* text = std::getenv(name);
  return text == nullptr ? -1 : std::atoi(text);
}

unsigned char pattern(int rank, int round, std::size_t i) {
  return static_cast<unsigned char>((rank * 131 + round * 17 + i * 7 + (i >> 8)) & 0xff);
}

}  // namespace

int main() {
  std::unique_ptr<ferry::Bootstrap> bootstrap;
  std::string failure;
  ferry::Status status = ferry::make_pmix_bootstrap(&bootstrap, &failure);
  if (!ferry::ok(status) || !bootstrap) {
    std::fprintf(stderr, "make_pmix_bootstrap: %s: %s\n", ferry::status_name(status), failure.c_str());
    return 1;
  }
  const int rank = bootstrap->rank();
  const int size = bootstrap->size();
  EXPECT(rank == env_int("OMPI_COMM_WORLD_RANK"), "rank %d, OMPI_COMM_WORLD_RANK %d", rank,
         env_int("OMPI_COMM_WORLD_RANK"));
  EXPECT(size == env_int("OMPI_COMM_WORLD_SIZE"), "size %d, OMPI_COMM_WORLD_SIZE %d", size,
         env_int("OMPI_COMM_WORLD_SIZE"));
  EXPECT(rank >= 0 && rank < size, "rank %d of %d", rank, size);
  if (rank < 0 || size <= 0 || rank >= size) return 1;

  EXPECT(ferry::ok(bootstrap->barrier()), "first barrier");

  const std::size_t sizes[] = {0, 1, 3, 8, 64, 1000, 4096, 12345, 4, 0, 2};
  int round = 0;
  for (std::size_t bytes : sizes) {
    ++round;
    std::vector<unsigned char> mine(bytes), all(bytes * size + 1, 0xee);
    for (std::size_t i = 0; i < bytes; ++i) mine[i] = pattern(rank, round, i);
    status = bootstrap->allgather(bytes ? mine.data() : nullptr, bytes ? all.data() : nullptr, bytes);
    EXPECT(ferry::ok(status), "allgather of %zu bytes: %s", bytes, ferry::status_name(status));
    int bad = 0;
    for (int peer = 0; peer < size && ferry::ok(status); ++peer)
      for (std::size_t i = 0; i < bytes; ++i)
        if (all[peer * bytes + i] != pattern(peer, round, i)) ++bad;
    EXPECT(bad == 0, "allgather of %zu bytes: %d wrong bytes", bytes, bad);
    EXPECT(all[bytes * size] == 0xee, "allgather of %zu bytes wrote past the end", bytes);
    if (round % 3 == 0) EXPECT(ferry::ok(bootstrap->barrier()), "barrier after round %d", round);
  }

  // A typical use: every rank's 64-bit identity, then a rank-dependent check.
  std::uint64_t id = 0x1000000000ull * (rank + 1) + rank;
  std::vector<std::uint64_t> ids(size);
  EXPECT(ferry::ok(bootstrap->allgather(&id, ids.data(), sizeof id)), "id allgather");
  for (int peer = 0; peer < size; ++peer)
    EXPECT(ids[peer] == 0x1000000000ull * (peer + 1) + peer, "id of rank %d", peer);

  // Rank 0 reports for everybody: gather each rank's error count.
  int counts_ok = 1;
  std::vector<int> counts(size, -1);
  if (!ferry::ok(bootstrap->allgather(&errors, counts.data(), sizeof errors))) counts_ok = 0;
  EXPECT(ferry::ok(bootstrap->barrier()), "last barrier");
  int total = 0;
  for (int c : counts) total += c < 0 ? 1 : c;
  if (!counts_ok) ++total;
  bootstrap.reset();
  if (rank == 0 && total == 0 && errors == 0) std::printf("No Errors\n");
  std::fflush(stdout);
  return total == 0 && errors == 0 ? 0 : 1;
}
