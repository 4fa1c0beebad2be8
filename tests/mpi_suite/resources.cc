// Resources over time: many device calls of every engine family, many
// communicators and device windows made and freed, and afterwards no more
// memory, file descriptors, mappings or threads than after the first round
// of each (which fills Ferry's caches and pools). Read from /proc/self.
// Rounds are FERRY_SUITE_ROUNDS (calls), a tenth of it communicators and a
// hundredth windows; the last round's results are checked.
#include <dirent.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "suite.h"

using namespace suite;

namespace {

struct Usage {
  long rss_kib = 0;
  long threads = 0;
  long fds = 0;
  long mappings = 0;
};

Usage usage_now() {
  Usage u;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kib = std::atol(line.c_str() + 6);
    if (line.rfind("Threads:", 0) == 0) u.threads = std::atol(line.c_str() + 8);
  }
  if (DIR* fds = opendir("/proc/self/fd")) {
    while (readdir(fds)) ++u.fds;
    closedir(fds);
  }
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) ++u.mappings;
  return u;
}

long rounds() {
  const char* text = std::getenv("FERRY_SUITE_ROUNDS");
  const long n = text ? std::atol(text) : 0;
  return n > 0 ? n : 100000;
}

// Runs `once` `times` times after one warm-up round and checks that usage
// grew by no more than a few of each resource: what Ferry makes once, when
// first needed (a bounce buffer and its copy stream the first time a send
// is withdrawn), not per call.
void steady(const std::string& family, long times, const std::function<void(bool last)>& once) {
  once(times == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  const Usage before = usage_now();
  for (long i = 0; i < times; ++i) once(i == times - 1);
  MPI_Barrier(MPI_COMM_WORLD);
  const Usage after = usage_now();
  const Case what{family, "", "", times, "device", "resources after the first round"};
  expect(after.fds <= before.fds + 8, what,
         "file descriptors " + std::to_string(before.fds) + " -> " + std::to_string(after.fds));
  expect(after.threads <= before.threads + 4, what,
         "threads " + std::to_string(before.threads) + " -> " + std::to_string(after.threads));
  expect(after.mappings <= before.mappings + 32, what,
         "mappings " + std::to_string(before.mappings) + " -> " + std::to_string(after.mappings));
  expect(after.rss_kib <= before.rss_kib + 32 * 1024, what,
         "resident KiB " + std::to_string(before.rss_kib) + " -> " + std::to_string(after.rss_kib));
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  const int rank = world_rank(), ranks = world_size();
  const long calls = rounds();
  constexpr long kCount = 257;  // odd
  const uint64_t id = next_case_id();
  const std::vector<double> mine = random_values<double>(kCount * ranks, id, rank);
  Buffer send = make_buffer(mine, Memory::device);
  Buffer recv = make_buffer(poisoned<double>(kCount * ranks), Memory::device);

  steady("MPI_Allreduce", calls, [&](bool last) {
    const Case what{"MPI_Allreduce", "MPI_DOUBLE", "MPI_SUM", kCount, "device", ""};
    check_mpi(MPI_Allreduce(send.data(), recv.data(), kCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
              what);
    if (!last) return;
    std::vector<double> want(kCount, 0.0);
    for (int r = 0; r < ranks; ++r) {
      const std::vector<double> theirs = random_values<double>(kCount * ranks, id, r);
      for (long i = 0; i < kCount; ++i) want[i] += theirs[i];
    }
    const std::vector<double> got = read_back<double>(recv, kCount);
    for (long i = 0; i < kCount; ++i)
      if (std::abs(got[i] - want[i]) > 1e-9 * (1 + std::abs(want[i]))) {
        fail(what,
             "element " + std::to_string(i) + " is " + show(got[i]) + ", want " + show(want[i]));
        break;
      }
  });
  steady("MPI_Bcast", calls, [&](bool) {
    check_mpi(MPI_Bcast(recv.data(), kCount, MPI_DOUBLE, 0, MPI_COMM_WORLD),
              Case{"MPI_Bcast", "MPI_DOUBLE", "", kCount, "device", ""});
  });
  steady("MPI_Alltoall", calls, [&](bool) {
    check_mpi(MPI_Alltoall(send.data(), kCount, MPI_DOUBLE, recv.data(), kCount, MPI_DOUBLE,
                           MPI_COMM_WORLD),
              Case{"MPI_Alltoall", "MPI_DOUBLE", "", kCount, "device", ""});
  });
  steady("MPI_Iallreduce", calls, [&](bool) {
    MPI_Request request;
    const Case what{"MPI_Iallreduce", "MPI_DOUBLE", "MPI_SUM", kCount, "device", ""};
    check_mpi(MPI_Iallreduce(send.data(), recv.data(), kCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                             &request),
              what);
    check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
  });
  steady("MPI_Isend/MPI_Irecv", calls, [&](bool) {
    MPI_Request requests[2];
    const Case what{"MPI_Isend/MPI_Irecv", "MPI_DOUBLE", "", kCount, "device", "ring"};
    check_mpi(MPI_Irecv(recv.data(), kCount, MPI_DOUBLE, (rank + ranks - 1) % ranks, 3,
                        MPI_COMM_WORLD, &requests[0]),
              what);
    check_mpi(MPI_Isend(send.data(), kCount, MPI_DOUBLE, (rank + 1) % ranks, 3, MPI_COMM_WORLD,
                        &requests[1]),
              what);
    check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), what);
  });
  steady("MPI_Comm_dup + MPI_Allreduce + MPI_Comm_free", calls / 10, [&](bool) {
    MPI_Comm comm;
    const Case what{"MPI_Comm_dup", "MPI_DOUBLE", "MPI_SUM",
                    kCount,         "device",     "a new communicator each round"};
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), what);
    check_mpi(MPI_Allreduce(send.data(), recv.data(), kCount, MPI_DOUBLE, MPI_SUM, comm), what);
    check_mpi(MPI_Comm_free(&comm), what);
  });
  steady("MPI_Win_allocate + MPI_Put + MPI_Win_free", calls / 100, [&](bool) {
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
    const Case what{"MPI_Win_allocate",       "MPI_DOUBLE", "", kCount, "device",
                    "a new window each round"};
    void* base = nullptr;
    MPI_Win win;
    check_mpi(MPI_Win_allocate(kCount * sizeof(double), sizeof(double), info, MPI_COMM_WORLD, &base,
                               &win),
              what);
    MPI_Info_free(&info);
    check_mpi(MPI_Win_fence(0, win), what);
    check_mpi(
        MPI_Put(send.data(), kCount, MPI_DOUBLE, (rank + 1) % ranks, 0, kCount, MPI_DOUBLE, win),
        what);
    check_mpi(MPI_Win_fence(0, win), what);
    check_mpi(MPI_Win_free(&win), what);
  });
  return finish();
}
