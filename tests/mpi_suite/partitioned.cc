// MPI 4.0's partitioned point-to-point on device buffers: MPI_Psend_init into
// MPI_Precv_init, started kRounds times. After each MPI_Start the sender
// writes each partition into its device buffer only just before it marks
// that partition ready (MPI_Pready one by one in reverse, MPI_Pready_range
// by halves, or MPI_Pready_list in a shuffled order), so a partition must be
// taken when it is readied, neither at the start nor at completion. The
// receiver polls MPI_Parrived and reads each partition from its device
// buffer as soon as it is reported, or polls only some, or just waits.
// Types: dense ones and one with a hole after every element, whose holes in
// the receive buffer must keep their values (not on Open MPI, see below). Odd partition counts and sizes,
// unaligned buffers, host and device buffers on either side.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "suite.h"

namespace {

using namespace suite;

constexpr int kRounds = 3;
constexpr int kTagSpan = 16000;

// Open MPI 5.0 places partitions count * size bytes apart, not count *
// extent (host buffers without Ferry get it wrong too): the type with holes
// runs where the MPI gets it right.
bool partitions_with_holes_work() { return !mpi_library_is("Open MPI"); }

enum class Ready { one_by_one_reversed, range_halves, shuffled_list };
enum class Arrival { poll_all, poll_even, wait_only };

const char* ready_name(Ready ready) {
  switch (ready) {
    case Ready::one_by_one_reversed: return "MPI_Pready";
    case Ready::range_halves: return "MPI_Pready_range";
    case Ready::shuffled_list: return "MPI_Pready_list";
  }
  return "?";
}

const char* arrival_name(Arrival arrival) {
  switch (arrival) {
    case Arrival::poll_all: return "MPI_Parrived(all)";
    case Arrival::poll_even: return "MPI_Parrived(even)";
    case Arrival::wait_only: return "wait";
  }
  return "?";
}

// A datatype whose elements are `stride` values of T apart: one value, then
// stride - 1 values of hole.
struct ElementType {
  Datatype type;
  int stride;
};

// The values of partition `partition` in a buffer of such elements.
size_t partition_values(long count, int stride) { return size_t(count) * size_t(stride); }

// The sender's values for one round.
template <class T>
std::vector<T> round_data(size_t values, uint64_t id, int sender, int round) {
  return random_values<T>(values, id, sender + world_size() * round);
}

// What the receive buffer must hold: the sent values at element positions,
// the poison in the holes.
template <class T>
std::vector<T> expected_receive(const std::vector<T>& sent, int stride) {
  std::vector<T> expected = poisoned<T>(sent.size());
  for (size_t i = 0; i < sent.size(); i += size_t(stride)) expected[i] = sent[i];
  return expected;
}

void ready_partitions(Ready ready, int partitions, MPI_Request request, const Case& what,
                      const std::function<void(int)>& write_partition) {
  switch (ready) {
    case Ready::one_by_one_reversed:
      for (int p = partitions - 1; p >= 0; --p) {
        write_partition(p);
        check_mpi(MPI_Pready(p, request), what);
      }
      return;
    case Ready::range_halves: {
      const int middle = partitions / 2;
      for (int p = middle; p < partitions; ++p) write_partition(p);
      check_mpi(MPI_Pready_range(middle, partitions - 1, request), what);
      if (middle > 0) {
        for (int p = 0; p < middle; ++p) write_partition(p);
        check_mpi(MPI_Pready_range(0, middle - 1, request), what);
      }
      return;
    }
    case Ready::shuffled_list: {
      std::vector<int> order(static_cast<size_t>(partitions));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(unsigned(partitions) * 7919u));
      for (int p : order) write_partition(p);
      check_mpi(MPI_Pready_list(partitions, order.data(), request), what);
      return;
    }
  }
}

template <class T>
void test_partitioned(const ElementType& element, int partitions, long count, Layout layout, Ready ready,
                      Arrival arrival) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const int stride = element.stride;
  const size_t per_partition = partition_values(count, stride);
  const size_t values = per_partition * size_t(partitions);
  const Case what{"MPI_Psend_init+MPI_Precv_init", element.type.name, "", count, layout_name(layout),
                  "partitions=" + std::to_string(partitions) + " " + ready_name(ready) + " " +
                      arrival_name(arrival) + " source=" + std::to_string(pair.source) +
                      " dest=" + std::to_string(pair.dest)};
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  if (rank == pair.source) {
    Buffer send = make_buffer(poisoned<T>(values), send_memory(layout, rank), offset);
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Psend_init(send.data(), partitions, count, element.type.handle, pair.dest, tag, MPI_COMM_WORLD,
                             MPI_INFO_NULL, &request),
              what);
    for (int round = 0; round < kRounds; ++round) {
      Case this_round = what;
      this_round.detail += " round=" + std::to_string(round);
      const std::vector<T> data = round_data<T>(values, id, pair.source, round);
      check_mpi(MPI_Start(&request), this_round);
      auto write_partition = [&](int p) {
        suite_memcpy(static_cast<T*>(send.data()) + size_t(p) * per_partition, data.data() + size_t(p) * per_partition,
                     per_partition * sizeof(T));
      };
      ready_partitions(ready, partitions, request, this_round, write_partition);
      check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), this_round);
      this_round.detail += " (send buffer)";
      expect_buffer(this_round, send, data);
    }
    check_mpi(MPI_Request_free(&request), what);
    expect(request == MPI_REQUEST_NULL, what, "MPI_Request_free left the handle set");
  } else if (rank == pair.dest) {
    Buffer recv = make_buffer(poisoned<T>(values), recv_memory(layout, rank), offset);
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Precv_init(recv.data(), partitions, count, element.type.handle, pair.source, tag,
                             MPI_COMM_WORLD, MPI_INFO_NULL, &request),
              what);
    for (int round = 0; round < kRounds; ++round) {
      Case this_round = what;
      this_round.detail += " round=" + std::to_string(round);
      const std::vector<T> untouched = poisoned<T>(values);
      recv.write(untouched.data(), untouched.size() * sizeof(T));
      const std::vector<T> expected = expected_receive(round_data<T>(values, id, pair.source, round), stride);
      check_mpi(MPI_Start(&request), this_round);
      if (arrival != Arrival::wait_only) {
        // Each polled partition is read from the buffer the moment it is
        // reported, while others may still be on their way.
        std::vector<bool> seen(size_t(partitions), false);
        int left = 0;
        for (int p = 0; p < partitions; ++p) left += arrival == Arrival::poll_all || p % 2 == 0;
        while (left > 0) {
          for (int p = 0; p < partitions; ++p) {
            if (seen[size_t(p)] || (arrival == Arrival::poll_even && p % 2 != 0)) continue;
            int flag = 0;
            check_mpi(MPI_Parrived(request, p, &flag), this_round);
            if (!flag) continue;
            seen[size_t(p)] = true;
            --left;
            std::vector<T> got(per_partition);
            suite_memcpy(got.data(), static_cast<const T*>(recv.data()) + size_t(p) * per_partition,
                         per_partition * sizeof(T));
            Case partition_case = this_round;
            partition_case.detail += " partition=" + std::to_string(p) + " when MPI_Parrived reported it";
            expect_values(partition_case,
                          std::vector<T>(expected.begin() + long(size_t(p) * per_partition),
                                         expected.begin() + long(size_t(p + 1) * per_partition)),
                          got);
          }
        }
      }
      check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), this_round);
      expect_buffer(this_round, recv, expected);
    }
    check_mpi(MPI_Request_free(&request), what);
    expect(request == MPI_REQUEST_NULL, what, "MPI_Request_free left the handle set");
  }
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  MPI_Datatype int_with_hole = MPI_DATATYPE_NULL;
  MPI_Type_create_resized(MPI_INT, 0, 2 * sizeof(int), &int_with_hole);
  MPI_Type_commit(&int_with_hole);
  const ElementType doubles{{MPI_DOUBLE, "MPI_DOUBLE"}, 1};
  const ElementType ints{{MPI_INT, "MPI_INT"}, 1};
  const ElementType chars{{MPI_CHAR, "MPI_CHAR"}, 1};
  const ElementType holes{{int_with_hole, "MPI_INT resized to 8 bytes"}, 2};
  const Layout layouts[] = {Layout::device, Layout::offset, Layout::mixed_sides};
  const Ready readies[] = {Ready::one_by_one_reversed, Ready::range_halves, Ready::shuffled_list};
  const Arrival arrivals[] = {Arrival::poll_all, Arrival::poll_even, Arrival::wait_only};
  const bool holes_work = partitions_with_holes_work();
  int shape = 0;
  for (const int partitions : {1, 3, 7}) {
    for (const long count : {1L, 5L, 333L}) {
      for (const Layout layout : layouts) {
        const Ready ready = readies[shape % 3];
        const Arrival arrival = arrivals[shape / 3 % 3];
        ++shape;
        test_partitioned<double>(doubles, partitions, count, layout, ready, arrival);
        if (holes_work) test_partitioned<int>(holes, partitions, count, layout, ready, arrival);
        test_partitioned<char>(chars, partitions, count + 2, layout, readies[(shape + 1) % 3], arrival);
      }
    }
  }
  // Large partitions: past the MPI's eager limits.
  test_partitioned<int>(ints, 4, 70001, Layout::device, Ready::shuffled_list, Arrival::poll_all);
  if (holes_work) test_partitioned<int>(holes, 3, 40001, Layout::offset, Ready::range_halves, Arrival::poll_even);
  MPI_Type_free(&int_with_hole);
  return finish();
}
