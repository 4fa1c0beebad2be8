// MPI_THREAD_MULTIPLE: several threads of each rank, each on its own
// duplicate of MPI_COMM_WORLD, run Allreduce, Bcast, Alltoallv and a halo
// exchange by MPI_Isend/MPI_Irecv on device buffers at the same time (sizes
// that take the engine worker and sizes that launch kernels), and exchange
// the other way round on one communicator all threads share, each with its
// own tag; every result checked against a host reference.
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "device_alloc.h"

namespace {

constexpr int kThreads = 3;
constexpr int kIterations = 24;
const long kCounts[] = {1, 7, 1023, 5001, 100003, 300001};

std::atomic<long> g_failures{0};

void fail(int thread, int iteration, const std::string& what) {
  if (g_failures.fetch_add(1) < 20)
    std::fprintf(stderr, "thread %d iteration %d: %s\n", thread, iteration, what.c_str());
}

// Exact in int64 for any rank count here.
std::int64_t value(int rank, int thread, int iteration, long i) {
  return (rank + 1) * 1000003LL * (i % 9973 + 1) + thread * 7 + iteration;
}

struct DeviceVector {
  explicit DeviceVector(std::size_t bytes) : bytes(bytes), ptr(suite_device_malloc(bytes ? bytes : 1)) {}
  ~DeviceVector() { suite_device_free(ptr); }
  std::size_t bytes;
  void* ptr;
};

void run_thread(int thread, MPI_Comm comm, MPI_Comm shared, int rank, int ranks) {
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    const long count = kCounts[(iteration + thread) % (sizeof(kCounts) / sizeof(kCounts[0]))];

    // Allreduce, sum of int64.
    std::vector<std::int64_t> mine(count), expected(count, 0), got(count);
    for (long i = 0; i < count; ++i) {
      mine[i] = value(rank, thread, iteration, i);
      for (int r = 0; r < ranks; ++r) expected[i] += value(r, thread, iteration, i);
    }
    DeviceVector send(count * 8), recv(count * 8);
    suite_memcpy(send.ptr, mine.data(), count * 8);
    if (MPI_Allreduce(send.ptr, recv.ptr, static_cast<int>(count), MPI_INT64_T, MPI_SUM, comm) != MPI_SUCCESS) {
      fail(thread, iteration, "MPI_Allreduce failed");
      continue;
    }
    suite_memcpy(got.data(), recv.ptr, count * 8);
    if (got != expected) fail(thread, iteration, "MPI_Allreduce of " + std::to_string(count) + " int64: wrong sum");

    // Bcast of bytes from a root that moves around.
    const int root = (iteration + thread) % ranks;
    std::vector<unsigned char> bytes(count), from_root(count);
    for (long i = 0; i < count; ++i) from_root[i] = static_cast<unsigned char>(value(root, thread, iteration, i));
    for (long i = 0; i < count; ++i) bytes[i] = rank == root ? from_root[i] : 0x5a;
    DeviceVector buffer(count);
    suite_memcpy(buffer.ptr, bytes.data(), count);
    if (MPI_Bcast(buffer.ptr, static_cast<int>(count), MPI_UNSIGNED_CHAR, root, comm) != MPI_SUCCESS) {
      fail(thread, iteration, "MPI_Bcast failed");
      continue;
    }
    suite_memcpy(bytes.data(), buffer.ptr, count);
    if (bytes != from_root) fail(thread, iteration, "MPI_Bcast of " + std::to_string(count) + " bytes: wrong data");

    // Alltoallv, a block of count / ranks + peer int32 to each peer.
    std::vector<int> counts(ranks), displs(ranks);
    int total = 0;
    for (int p = 0; p < ranks; ++p) {
      counts[p] = static_cast<int>(count / ranks) + p;
      displs[p] = total;
      total += counts[p];
    }
    std::vector<int> recv_counts(ranks), recv_displs(ranks);
    int recv_total = 0;
    for (int p = 0; p < ranks; ++p) {
      recv_counts[p] = static_cast<int>(count / ranks) + rank;
      recv_displs[p] = recv_total;
      recv_total += recv_counts[p];
    }
    std::vector<std::int32_t> out(total), in(recv_total), want(recv_total);
    for (int p = 0; p < ranks; ++p)
      for (int k = 0; k < counts[p]; ++k)
        out[displs[p] + k] = static_cast<std::int32_t>(value(rank, thread, iteration, p * 100000 + k));
    for (int p = 0; p < ranks; ++p)
      for (int k = 0; k < recv_counts[p]; ++k)
        want[recv_displs[p] + k] = static_cast<std::int32_t>(value(p, thread, iteration, rank * 100000 + k));
    DeviceVector out_device(total * 4), in_device(recv_total * 4);
    suite_memcpy(out_device.ptr, out.data(), total * 4);
    if (MPI_Alltoallv(out_device.ptr, counts.data(), displs.data(), MPI_INT32_T, in_device.ptr, recv_counts.data(),
                      recv_displs.data(), MPI_INT32_T, comm) != MPI_SUCCESS) {
      fail(thread, iteration, "MPI_Alltoallv failed");
      continue;
    }
    suite_memcpy(in.data(), in_device.ptr, recv_total * 4);
    if (in != want) fail(thread, iteration, "MPI_Alltoallv around " + std::to_string(count) + " int32: wrong data");

    // A halo exchange around the ring by MPI_Isend and MPI_Irecv (sends
    // first in the array every other iteration), int64.
    const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
    std::vector<std::int64_t> to_right(count), from_left(count), want_left(count);
    for (long i = 0; i < count; ++i) {
      to_right[i] = value(rank, thread, iteration, i);
      want_left[i] = value(left, thread, iteration, i);
    }
    DeviceVector halo_out(count * 8), halo_in(count * 8);
    suite_memcpy(halo_out.ptr, to_right.data(), count * 8);
    MPI_Request requests[2];
    const int send_at = iteration % 2, receive_at = 1 - send_at;
    if (MPI_Irecv(halo_in.ptr, static_cast<int>(count), MPI_INT64_T, left, 3, comm, &requests[receive_at]) !=
            MPI_SUCCESS ||
        MPI_Isend(halo_out.ptr, static_cast<int>(count), MPI_INT64_T, right, 3, comm, &requests[send_at]) !=
            MPI_SUCCESS ||
        MPI_Waitall(2, requests, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      fail(thread, iteration, "MPI_Isend/MPI_Irecv/MPI_Waitall failed");
      continue;
    }
    suite_memcpy(from_left.data(), halo_in.ptr, count * 8);
    if (from_left != want_left)
      fail(thread, iteration, "halo exchange of " + std::to_string(count) + " int64: wrong data");

    // The other way round on the shared communicator, the thread's own tag
    // telling its messages apart: MPI_Isend, a blocking MPI_Recv, MPI_Wait.
    const long other_count = kCounts[(iteration + 2 * thread + 1) % (sizeof(kCounts) / sizeof(kCounts[0]))];
    std::vector<std::int64_t> to_left(other_count), from_right(other_count), want_right(other_count);
    for (long i = 0; i < other_count; ++i) {
      to_left[i] = value(rank, thread, iteration + 1000, i);
      want_right[i] = value(right, thread, iteration + 1000, i);
    }
    DeviceVector back_out(other_count * 8), back_in(other_count * 8);
    suite_memcpy(back_out.ptr, to_left.data(), other_count * 8);
    const int tag = 100 + thread;
    MPI_Request back_send = MPI_REQUEST_NULL;
    MPI_Status status;
    int received = -1;
    if (MPI_Isend(back_out.ptr, static_cast<int>(other_count), MPI_INT64_T, left, tag, shared, &back_send) !=
            MPI_SUCCESS ||
        MPI_Recv(back_in.ptr, static_cast<int>(other_count), MPI_INT64_T, right, tag, shared, &status) !=
            MPI_SUCCESS ||
        MPI_Get_count(&status, MPI_INT64_T, &received) != MPI_SUCCESS ||
        MPI_Wait(&back_send, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      fail(thread, iteration, "MPI_Isend/MPI_Recv/MPI_Wait on the shared communicator failed");
      continue;
    }
    suite_memcpy(from_right.data(), back_in.ptr, other_count * 8);
    if (received != other_count || status.MPI_TAG != tag || status.MPI_SOURCE != right || from_right != want_right)
      fail(thread, iteration,
           "exchange of " + std::to_string(other_count) + " int64 on the shared communicator: wrong data or status");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) std::fprintf(stderr, "MPI_THREAD_MULTIPLE not provided (%d): nothing to test\n", provided);
    if (rank == 0) std::printf("No Errors\n");
    MPI_Finalize();
    return 0;
  }
  suite_device_init();
  std::vector<MPI_Comm> comms(kThreads + 1);
  for (MPI_Comm& comm : comms) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  const MPI_Comm shared = comms[kThreads];
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(run_thread, t, comms[t], shared, rank, ranks);
  for (std::thread& t : threads) t.join();
  for (MPI_Comm& comm : comms) MPI_Comm_free(&comm);

  long mine = g_failures.load(), total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (total == 0) std::printf("No Errors\n");
    else std::fprintf(stderr, "Found %ld errors (device buffers: %s)\n", total, suite_device_backend());
  }
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
