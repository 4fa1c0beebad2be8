// MPI 4.0's large-count calls (MPI_Send_c and its kin, MPICH 4 and 5) on
// device buffers: Python's mpi4py makes every call through them where the
// MPI has them. Point-to-point (blocking, nonblocking, sendrecv), blocking
// and nonblocking collectives with MPI_Count counts and MPI_Aint
// displacements (arrays as long as the group, the local group, a
// neighbourhood, or passed at the root alone), and
// packing with an MPI_Count position, checked against host references on
// random data with odd counts and unaligned offsets. A count past an int
// on device memory returns MPI_ERR_COUNT (the real MPI would read the
// device pointer); a large count on host memory is the real MPI's.
#include <climits>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "suite.h"

namespace {

using namespace suite;

bool under_ferry() {
  const char* backend = suite_ferry_backend();
  return backend && std::strcmp(backend, "host") != 0;
}

// Blocks of uneven sizes (rank 1's empty), as MPI_Count counts and
// MPI_Aint displacements with a gap of 3 elements between blocks.
struct Blocks {
  std::vector<MPI_Count> counts;
  std::vector<MPI_Aint> displs;
  MPI_Count span = 0;  // elements the blocks and gaps take
};

Blocks uneven_blocks(long around, int ranks) {
  Blocks b;
  for (int count : uneven_counts(around, ranks)) {
    b.counts.push_back(count);
    b.displs.push_back(b.span);
    b.span += count + 3;
  }
  return b;
}

void test_send_recv(uint64_t id) {
  const Pair pair = pair_for(id);
  const int rank = world_rank();
  constexpr MPI_Count kCount = 1001;
  const std::vector<double> sent = random_values<double>(kCount, id, pair.source);
  const Case what{"MPI_Send_c/MPI_Recv_c", "MPI_DOUBLE", "", kCount, "offset"};
  if (rank == pair.source) {
    const Buffer send = make_buffer(sent, Memory::device, sizeof(double));
    check_mpi(MPI_Send_c(send.data(), kCount, MPI_DOUBLE, pair.dest, 7, MPI_COMM_WORLD), what);
  } else if (rank == pair.dest) {
    const Buffer recv = make_buffer(poisoned<double>(kCount + 5), Memory::device, sizeof(double));
    MPI_Status status;
    check_mpi(MPI_Recv_c(recv.data(), kCount + 5, MPI_DOUBLE, pair.source, 7, MPI_COMM_WORLD, &status), what);
    MPI_Count got = 0;
    check_mpi(MPI_Get_count_c(&status, MPI_DOUBLE, &got), what);
    expect(got == kCount, what, "MPI_Get_count_c says " + std::to_string(got));
    std::vector<double> expected = sent;
    expected.resize(kCount + 5, poison<double>());
    expect_buffer(what, recv, expected);
  }
}

void test_nonblocking_ring(uint64_t id) {
  const int rank = world_rank(), size = world_size();
  const MPI_Count count = 333 + id % 7;
  const std::vector<std::int32_t> mine = random_values<std::int32_t>(size_t(count), id, rank);
  const int left = (rank + size - 1) % size, right = (rank + 1) % size;
  const Case what{"MPI_Isend_c/MPI_Irecv_c", "MPI_INT32_T", "", long(count), "device"};
  const Buffer send = make_buffer(mine, Memory::device);
  const Buffer recv = make_buffer(poisoned<std::int32_t>(size_t(count)), Memory::device);
  MPI_Request requests[2];
  check_mpi(MPI_Irecv_c(recv.data(), count, MPI_INT32_T, left, 11, MPI_COMM_WORLD, &requests[0]), what);
  check_mpi(MPI_Isend_c(send.data(), count, MPI_INT32_T, right, 11, MPI_COMM_WORLD, &requests[1]), what);
  check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), what);
  expect_buffer(what, recv, random_values<std::int32_t>(size_t(count), id, left));

  const Case swap{"MPI_Sendrecv_c", "MPI_INT32_T", "", long(count), "device"};
  const Buffer back = make_buffer(poisoned<std::int32_t>(size_t(count)), Memory::device);
  check_mpi(MPI_Sendrecv_c(send.data(), count, MPI_INT32_T, left, 12, back.data(), count, MPI_INT32_T, right, 12,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            swap);
  expect_buffer(swap, back, random_values<std::int32_t>(size_t(count), id, right));
}

void test_reductions(uint64_t id) {
  const int rank = world_rank(), size = world_size();
  const MPI_Count count = 777;
  std::vector<std::int64_t> sum(size_t(count), 0);
  for (int r = 0; r < size; ++r) {
    const std::vector<std::int64_t> v = random_values<std::int64_t>(size_t(count), id, r);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
  }
  const std::vector<std::int64_t> mine = random_values<std::int64_t>(size_t(count), id, rank);
  {
    const Case what{"MPI_Allreduce_c", "MPI_INT64_T", "MPI_SUM", long(count), "device"};
    const Buffer send = make_buffer(mine, Memory::device);
    const Buffer recv = make_buffer(poisoned<std::int64_t>(size_t(count)), Memory::device);
    check_mpi(MPI_Allreduce_c(send.data(), recv.data(), count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), what);
    expect_buffer(what, recv, sum);
  }
  {
    const Case what{"MPI_Allreduce_c", "MPI_INT64_T", "MPI_SUM", long(count), "in place"};
    const Buffer data = make_buffer(mine, Memory::device);
    check_mpi(MPI_Allreduce_c(MPI_IN_PLACE, data.data(), count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), what);
    expect_buffer(what, data, sum);
  }
  {
    const Case what{"MPI_Iallreduce_c", "MPI_INT64_T", "MPI_SUM", long(count), "device"};
    const Buffer send = make_buffer(mine, Memory::device);
    const Buffer recv = make_buffer(poisoned<std::int64_t>(size_t(count)), Memory::device);
    MPI_Request request;
    check_mpi(MPI_Iallreduce_c(send.data(), recv.data(), count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &request),
              what);
    check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
    expect_buffer(what, recv, sum);
  }
  {
    const int root = size - 1;
    const Case what{"MPI_Reduce_c", "MPI_INT64_T", "MPI_SUM", long(count), "root " + std::to_string(root)};
    const Buffer send = make_buffer(mine, Memory::device);
    const Buffer recv = make_buffer(poisoned<std::int64_t>(size_t(count)), Memory::device);
    check_mpi(MPI_Reduce_c(send.data(), recv.data(), count, MPI_INT64_T, MPI_SUM, root, MPI_COMM_WORLD), what);
    if (rank == root) expect_buffer(what, recv, sum);
  }
}

void test_data_movement(uint64_t id) {
  const int rank = world_rank(), size = world_size();
  {
    const MPI_Count bytes = 12345;
    const int root = 1 % size;
    const Case what{"MPI_Bcast_c", "MPI_BYTE", "", long(bytes), "offset, root " + std::to_string(root)};
    const std::vector<std::uint8_t> data = random_values<std::uint8_t>(size_t(bytes), id, root);
    const Buffer buffer =
        make_buffer(rank == root ? data : poisoned<std::uint8_t>(size_t(bytes)), Memory::device, 3);
    check_mpi(MPI_Bcast_c(buffer.data(), bytes, MPI_BYTE, root, MPI_COMM_WORLD), what);
    expect_buffer(what, buffer, data);
  }
  {
    const MPI_Count each = 101;
    const Case what{"MPI_Allgather_c", "MPI_FLOAT", "", long(each), "device"};
    const Buffer send = make_buffer(random_values<float>(size_t(each), id, rank), Memory::device);
    const Buffer recv = make_buffer(poisoned<float>(size_t(each) * size), Memory::device);
    check_mpi(MPI_Allgather_c(send.data(), each, MPI_FLOAT, recv.data(), each, MPI_FLOAT, MPI_COMM_WORLD), what);
    std::vector<float> expected;
    for (int r = 0; r < size; ++r) {
      const std::vector<float> v = random_values<float>(size_t(each), id, r);
      expected.insert(expected.end(), v.begin(), v.end());
    }
    expect_buffer(what, recv, expected);
  }
  {
    const Blocks blocks = uneven_blocks(57, size);
    const Case what{"MPI_Allgatherv_c", "MPI_INT32_T", "", 57, "gaps between blocks"};
    const MPI_Count mine = blocks.counts[size_t(rank)];
    const Buffer send = make_buffer(random_values<std::int32_t>(size_t(mine), id, rank), Memory::device);
    const Buffer recv = make_buffer(poisoned<std::int32_t>(size_t(blocks.span)), Memory::device);
    check_mpi(MPI_Allgatherv_c(send.data(), mine, MPI_INT32_T, recv.data(), blocks.counts.data(),
                               blocks.displs.data(), MPI_INT32_T, MPI_COMM_WORLD),
              what);
    std::vector<std::int32_t> expected = poisoned<std::int32_t>(size_t(blocks.span));
    for (int r = 0; r < size; ++r) {
      const std::vector<std::int32_t> v = random_values<std::int32_t>(size_t(blocks.counts[size_t(r)]), id, r);
      std::copy(v.begin(), v.end(), expected.begin() + blocks.displs[size_t(r)]);
    }
    expect_buffer(what, recv, expected);
  }
  {
    // The receive arrays are the root's alone: the others pass none.
    const int root = 0;
    const Blocks blocks = uneven_blocks(40, size);
    const Case what{"MPI_Gatherv_c", "MPI_DOUBLE", "", 40, "arrays at the root only"};
    const MPI_Count mine = blocks.counts[size_t(rank)];
    const Buffer send = make_buffer(random_values<double>(size_t(mine), id, rank), Memory::device);
    const Buffer recv = make_buffer(poisoned<double>(size_t(blocks.span)), Memory::device);
    const bool at_root = rank == root;
    check_mpi(MPI_Gatherv_c(send.data(), mine, MPI_DOUBLE, recv.data(), at_root ? blocks.counts.data() : nullptr,
                            at_root ? blocks.displs.data() : nullptr, MPI_DOUBLE, root, MPI_COMM_WORLD),
              what);
    if (at_root) {
      std::vector<double> expected = poisoned<double>(size_t(blocks.span));
      for (int r = 0; r < size; ++r) {
        const std::vector<double> v = random_values<double>(size_t(blocks.counts[size_t(r)]), id, r);
        std::copy(v.begin(), v.end(), expected.begin() + blocks.displs[size_t(r)]);
      }
      expect_buffer(what, recv, expected);
    }
  }
  {
    // Rank r sends (r + q) % 5 + 1 elements to rank q.
    const Case what{"MPI_Alltoallv_c", "MPI_INT16_T", "", 0, "device"};
    std::vector<MPI_Count> send_counts(static_cast<size_t>(size)), recv_counts(static_cast<size_t>(size));
    std::vector<MPI_Aint> send_displs(static_cast<size_t>(size)), recv_displs(static_cast<size_t>(size));
    MPI_Aint send_total = 0, recv_total = 0;
    for (int q = 0; q < size; ++q) {
      send_counts[size_t(q)] = (rank + q) % 5 + 1;
      recv_counts[size_t(q)] = (q + rank) % 5 + 1;
      send_displs[size_t(q)] = send_total;
      recv_displs[size_t(q)] = recv_total;
      send_total += send_counts[size_t(q)];
      recv_total += recv_counts[size_t(q)];
    }
    const Buffer send = make_buffer(random_values<std::int16_t>(size_t(send_total), id, rank), Memory::device);
    const Buffer recv = make_buffer(poisoned<std::int16_t>(size_t(recv_total)), Memory::device);
    check_mpi(MPI_Alltoallv_c(send.data(), send_counts.data(), send_displs.data(), MPI_INT16_T, recv.data(),
                              recv_counts.data(), recv_displs.data(), MPI_INT16_T, MPI_COMM_WORLD),
              what);
    std::vector<std::int16_t> expected;
    for (int q = 0; q < size; ++q) {
      // Rank q's block for this rank starts after its blocks for the ranks
      // before; its values are a prefix of rank q's whole send buffer's.
      MPI_Aint at = 0;
      for (int p = 0; p < rank; ++p) at += (q + p) % 5 + 1;
      const std::vector<std::int16_t> theirs =
          random_values<std::int16_t>(size_t(at + recv_counts[size_t(q)]), id, q);
      expected.insert(expected.end(), theirs.begin() + at, theirs.end());
    }
    expect_buffer(what, recv, expected);
  }
}

// Arrays whose lengths are not the communicator's size: the local group's
// for MPI_Reduce_scatter, the root's alone for MPI_Scatterv, a
// neighbourhood's degree for MPI_Neighbor_alltoallv.
void test_other_lengths(uint64_t id) {
  const int rank = world_rank(), size = world_size();
  {
    std::vector<MPI_Count> counts(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) counts[size_t(r)] = 2 * r + 3;
    const MPI_Count total = std::accumulate(counts.begin(), counts.end(), MPI_Count(0));
    const Case what{"MPI_Reduce_scatter_c", "MPI_INT32_T", "MPI_SUM", long(total), "device"};
    std::vector<std::int32_t> sum(size_t(total), 0);
    for (int r = 0; r < size; ++r) {
      const std::vector<std::int32_t> v = random_values<std::int32_t>(size_t(total), id, r, Values::small);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
    }
    const Buffer send =
        make_buffer(random_values<std::int32_t>(size_t(total), id, rank, Values::small), Memory::device);
    const Buffer recv = make_buffer(poisoned<std::int32_t>(size_t(counts[size_t(rank)])), Memory::device);
    check_mpi(MPI_Reduce_scatter_c(send.data(), recv.data(), counts.data(), MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD),
              what);
    const MPI_Count first = std::accumulate(counts.begin(), counts.begin() + rank, MPI_Count(0));
    expect_buffer(what, recv, std::vector<std::int32_t>(sum.begin() + first, sum.begin() + first + counts[size_t(rank)]));
  }
  {
    const int root = size - 1;
    const Blocks blocks = uneven_blocks(33, size);
    const Case what{"MPI_Scatterv_c", "MPI_DOUBLE", "", 33, "arrays at the root only"};
    const std::vector<double> all = random_values<double>(size_t(blocks.span), id, root);
    const bool at_root = rank == root;
    const Buffer send = make_buffer(all, Memory::device);
    const MPI_Count mine = blocks.counts[size_t(rank)];
    const Buffer recv = make_buffer(poisoned<double>(size_t(mine)), Memory::device);
    check_mpi(MPI_Scatterv_c(send.data(), at_root ? blocks.counts.data() : nullptr,
                             at_root ? blocks.displs.data() : nullptr, MPI_DOUBLE, recv.data(), mine, MPI_DOUBLE, root,
                             MPI_COMM_WORLD),
              what);
    const auto from = all.begin() + blocks.displs[size_t(rank)];
    expect_buffer(what, recv, std::vector<double>(from, from + mine));
  }
  // A periodic ring: neighbours left, then right; k + 1 elements to the
  // left, k + 2 to the right, where k is the sender's rank. From 3 ranks:
  // with two, both neighbours are one rank, whose two messages MPI
  // libraries match to the two slots in either order.
  if (size >= 3) {
    MPI_Comm ring;
    const int dims[1] = {size}, periods[1] = {1};
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring);
    const int left = (rank + size - 1) % size, right = (rank + 1) % size;
    const Case what{"MPI_Neighbor_alltoallv_c", "MPI_INT64_T", "", 0, "periodic ring"};
    const MPI_Count send_counts[2] = {rank + 1, rank + 2};
    const MPI_Aint send_displs[2] = {0, rank + 1};
    const MPI_Count recv_counts[2] = {left + 2, right + 1};
    const MPI_Aint recv_displs[2] = {0, left + 2};
    const std::vector<std::int64_t> mine = random_values<std::int64_t>(size_t(2 * rank + 3), id, rank);
    const Buffer send = make_buffer(mine, Memory::device);
    const Buffer recv = make_buffer(poisoned<std::int64_t>(size_t(left + right + 3)), Memory::device);
    check_mpi(MPI_Neighbor_alltoallv_c(send.data(), send_counts, send_displs, MPI_INT64_T, recv.data(), recv_counts,
                                       recv_displs, MPI_INT64_T, ring),
              what);
    // From the left its block for its right neighbour, from the right its
    // block for its left one.
    const std::vector<std::int64_t> from_left = random_values<std::int64_t>(size_t(2 * left + 3), id, left);
    const std::vector<std::int64_t> from_right = random_values<std::int64_t>(size_t(2 * right + 3), id, right);
    std::vector<std::int64_t> expected(from_left.begin() + left + 1, from_left.end());
    expected.insert(expected.end(), from_right.begin(), from_right.begin() + right + 1);
    expect_buffer(what, recv, expected);
    MPI_Comm_free(&ring);
  }
}

void test_pack(uint64_t id) {
  const MPI_Count count = 99;
  const Case what{"MPI_Pack_c/MPI_Unpack_c", "MPI_DOUBLE", "", long(count), "device to host and back"};
  const std::vector<double> data = random_values<double>(size_t(count), id, world_rank());
  const Buffer in = make_buffer(data, Memory::device);
  MPI_Count packed_size = 0;
  check_mpi(MPI_Pack_size_c(count, MPI_DOUBLE, MPI_COMM_WORLD, &packed_size), what);
  std::vector<char> packed(size_t(packed_size) + 16);
  MPI_Count position = 16;  // past a header the program wrote first
  check_mpi(MPI_Pack_c(in.data(), count, MPI_DOUBLE, packed.data(), MPI_Count(packed.size()), &position,
                       MPI_COMM_WORLD),
            what);
  expect(position == 16 + packed_size, what, "MPI_Pack_c left position at " + std::to_string(position));
  const Buffer out = make_buffer(poisoned<double>(size_t(count)), Memory::device);
  MPI_Count read_at = 16;
  check_mpi(MPI_Unpack_c(packed.data(), MPI_Count(packed.size()), &read_at, out.data(), count, MPI_DOUBLE,
                         MPI_COMM_WORLD),
            what);
  expect(read_at == position, what, "MPI_Unpack_c left position at " + std::to_string(read_at));
  expect_buffer(what, out, data);
}

// Past an int on device memory: MPI_ERR_COUNT, on
// every rank alike, before any data moves.
void test_beyond_int() {
  if (!under_ferry()) return;
  const Case what{"MPI_Bcast_c", "MPI_BYTE", "", 0, "count 2^31 on device memory"};
  const Buffer buffer(64, Memory::device);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  const int rc = MPI_Bcast_c(buffer.data(), MPI_Count(INT_MAX) + 1, MPI_BYTE, 0, comm);
  int error_class = MPI_SUCCESS, length = 0;
  char text[MPI_MAX_ERROR_STRING] = "";
  MPI_Error_class(rc, &error_class);
  MPI_Error_string(rc, text, &length);
  expect(error_class == MPI_ERR_COUNT, what, std::string("error class ") + std::to_string(error_class) + ": " + text);
  MPI_Comm_free(&comm);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  for (int round = 0; round < 2 * world_size(); ++round) test_send_recv(next_case_id());
  test_nonblocking_ring(next_case_id());
  test_reductions(next_case_id());
  test_data_movement(next_case_id());
  test_other_lengths(next_case_id());
  test_pack(next_case_id());
  test_beyond_int();
  return finish();
}
