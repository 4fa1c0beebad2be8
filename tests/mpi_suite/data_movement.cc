// Data movement on device buffers: MPI_Bcast, MPI_Gather(v), MPI_Scatter(v),
// MPI_Allgather(v) and MPI_Alltoall(v, w) for several element types, counts
// and buffer layouts. Every received element, and every gap between blocks
// that must stay untouched, is checked against a locally built reference.
#include <algorithm>

#include "suite.h"

namespace {

using namespace suite;

const std::vector<long> kCounts = {0, 1, 7, 1023};
const std::vector<Layout> kLayouts = {Layout::device, Layout::offset, Layout::in_place,
                                      Layout::mixed_ranks, Layout::mixed_sides};

// The data rank `from` sends to rank `to` in one case.
template <class T>
std::vector<T> block(uint64_t case_id, int from, int to, size_t count) {
  return random_values<T>(count, case_id, from * world_size() + to);
}

// Where each rank's block sits in a buffer of blocks.
struct Blocks {
  std::vector<int> counts;
  std::vector<int> displs;
  size_t extent = 0;
};

// Blocks back to back in rank order, as the non-v collectives lay them out.
Blocks packed(const std::vector<int>& counts) {
  Blocks blocks{counts, std::vector<int>(counts.size())};
  for (size_t rank = 0; rank < counts.size(); ++rank) {
    blocks.displs[rank] = int(blocks.extent);
    blocks.extent += counts[rank];
  }
  return blocks;
}

// Blocks in reverse rank order, each followed by a one-element gap, so that
// misplaced blocks and writes into the gaps both show up.
Blocks spread(const std::vector<int>& counts) {
  Blocks blocks{counts, std::vector<int>(counts.size())};
  for (int rank = int(counts.size()) - 1; rank >= 0; --rank) {
    blocks.displs[rank] = int(blocks.extent);
    blocks.extent += counts[rank] + 1;
  }
  return blocks;
}

Blocks blocks_for(bool vector_variant, long count) {
  return vector_variant ? spread(uneven_counts(count, world_size()))
                        : packed(std::vector<int>(world_size(), int(count)));
}

// A buffer holding block_of(rank) at each rank's displacement, poison elsewhere.
template <class T, class BlockOf>
std::vector<T> assemble(const Blocks& blocks, BlockOf block_of) {
  std::vector<T> buffer = poisoned<T>(blocks.extent);
  for (size_t rank = 0; rank < blocks.counts.size(); ++rank) {
    const std::vector<T> values = block_of(int(rank));
    std::copy(values.begin(), values.end(), buffer.begin() + blocks.displs[rank]);
  }
  return buffer;
}

template <class T>
void test_bcast(const Datatype& type, long count, Layout layout) {
  if (layout == Layout::in_place) return;  // MPI_Bcast has a single buffer.
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int root = int(id % world_size());
  const Case what{"MPI_Bcast", type.name,           "",
                  count,       layout_name(layout), "root=" + std::to_string(root)};
  const std::vector<T> data = random_values<T>(count, id, root);
  const bool is_root = rank == root;
  // The root's buffer is what it sends, the others' what they receive.
  const Buffer buffer = make_buffer(is_root ? data : poisoned<T>(count),
                                    is_root ? send_memory(layout, rank) : recv_memory(layout, rank),
                                    offset_bytes(layout, sizeof(T), id));
  check_mpi(MPI_Bcast(buffer.data(), count, type.handle, root, MPI_COMM_WORLD), what);
  expect_buffer(what, buffer, data);
}

template <class T>
void test_gather(const Datatype& type, long count, Layout layout, bool vector_variant) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int root = int(id % world_size());
  const Blocks blocks = blocks_for(vector_variant, count);
  const Case what{vector_variant ? "MPI_Gatherv" : "MPI_Gather",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "root=" + std::to_string(root)};
  const auto contribution = [&](int from) { return block<T>(id, from, root, blocks.counts[from]); };
  const std::vector<T> mine = contribution(rank);
  const bool is_root = rank == root;
  const bool in_place = is_root && layout == Layout::in_place;
  const std::vector<T> recv_initial = assemble<T>(blocks, [&](int from) {
    return in_place && from == rank ? mine : poisoned<T>(blocks.counts[from]);
  });
  const Operands operands =
      place(layout, id, rank, in_place, &mine, is_root ? &recv_initial : nullptr);
  if (vector_variant) {
    check_mpi(
        MPI_Gatherv(operands.send_arg(), blocks.counts[rank], type.handle, operands.recv_arg(),
                    blocks.counts.data(), blocks.displs.data(), type.handle, root, MPI_COMM_WORLD),
        what);
  } else {
    check_mpi(MPI_Gather(operands.send_arg(), count, type.handle, operands.recv_arg(), count,
                         type.handle, root, MPI_COMM_WORLD),
              what);
  }
  check_operands(what, operands, is_root ? assemble<T>(blocks, contribution) : std::vector<T>(),
                 &mine);
}

template <class T>
void test_scatter(const Datatype& type, long count, Layout layout, bool vector_variant) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int root = int(id % world_size());
  const Blocks blocks = blocks_for(vector_variant, count);
  const Case what{vector_variant ? "MPI_Scatterv" : "MPI_Scatter",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "root=" + std::to_string(root)};
  const auto part = [&](int to) { return block<T>(id, root, to, blocks.counts[to]); };
  const bool is_root = rank == root;
  // In place, the root's own part stays in its send buffer: no receive buffer.
  const bool in_place = is_root && layout == Layout::in_place;
  const std::vector<T> all_parts = assemble<T>(blocks, part);
  const std::vector<T> recv_initial = poisoned<T>(blocks.counts[rank]);
  const Operands operands =
      place(layout, id, rank, /*in_place=*/false, is_root ? &all_parts : nullptr,
            in_place ? nullptr : &recv_initial);
  void* recv_arg = in_place ? MPI_IN_PLACE : operands.recv_arg();
  if (vector_variant) {
    check_mpi(
        MPI_Scatterv(operands.send_arg(), blocks.counts.data(), blocks.displs.data(), type.handle,
                     recv_arg, blocks.counts[rank], type.handle, root, MPI_COMM_WORLD),
        what);
  } else {
    check_mpi(MPI_Scatter(operands.send_arg(), count, type.handle, recv_arg, count, type.handle,
                          root, MPI_COMM_WORLD),
              what);
  }
  check_operands(what, operands, part(rank), &all_parts);
}

template <class T>
void test_allgather(const Datatype& type, long count, Layout layout, bool vector_variant) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Blocks blocks = blocks_for(vector_variant, count);
  const Case what{vector_variant ? "MPI_Allgatherv" : "MPI_Allgather", type.name, "", count,
                  layout_name(layout)};
  const auto contribution = [&](int from) { return block<T>(id, from, 0, blocks.counts[from]); };
  const std::vector<T> mine = contribution(rank);
  const bool in_place = layout == Layout::in_place;
  const std::vector<T> recv_initial = assemble<T>(blocks, [&](int from) {
    return in_place && from == rank ? mine : poisoned<T>(blocks.counts[from]);
  });
  const Operands operands = place(layout, id, rank, in_place, &mine, &recv_initial);
  if (vector_variant) {
    check_mpi(
        MPI_Allgatherv(operands.send_arg(), blocks.counts[rank], type.handle, operands.recv_arg(),
                       blocks.counts.data(), blocks.displs.data(), type.handle, MPI_COMM_WORLD),
        what);
  } else {
    check_mpi(MPI_Allgather(operands.send_arg(), count, type.handle, operands.recv_arg(), count,
                            type.handle, MPI_COMM_WORLD),
              what);
  }
  check_operands(what, operands, assemble<T>(blocks, contribution), &mine);
}

enum class Alltoall { plain, v, w };

// How many elements rank `from` sends to rank `to`. Uneven and with empty
// pairs for the v and w variants; in place the counts must be symmetric, since
// each rank sends from the slots it receives into.
int pair_count(Alltoall variant, bool in_place, long count, int from, int to) {
  if (variant == Alltoall::plain || count == 0) return int(count);
  if (in_place) return (from + to) % 4 == 1 ? 0 : int(count) + (from + to) % 3;
  return (from + 2 * to) % 4 == 1 ? 0 : int(count) + (2 * from + to) % 3;
}

template <class T>
void test_alltoall(const Datatype& type, long count, Layout layout, Alltoall variant) {
  static const char* const kNames[] = {"MPI_Alltoall", "MPI_Alltoallv", "MPI_Alltoallw"};
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int ranks = world_size();
  const bool in_place = layout == Layout::in_place;
  const Case what{kNames[int(variant)], type.name, "", count, layout_name(layout)};
  std::vector<int> send_counts(ranks);
  std::vector<int> recv_counts(ranks);
  for (int peer = 0; peer < ranks; ++peer) {
    send_counts[peer] = pair_count(variant, in_place, count, rank, peer);
    recv_counts[peer] = pair_count(variant, in_place, count, peer, rank);
  }
  const bool uneven = variant != Alltoall::plain;
  const Blocks send_blocks = uneven ? spread(send_counts) : packed(send_counts);
  const Blocks recv_blocks = uneven ? spread(recv_counts) : packed(recv_counts);
  const auto outgoing = [&](int to) { return block<T>(id, rank, to, send_counts[to]); };
  const auto incoming = [&](int from) { return block<T>(id, from, rank, recv_counts[from]); };
  const std::vector<T> send = assemble<T>(send_blocks, outgoing);
  // In place, each rank sends from the very slots it then receives into.
  const std::vector<T> recv_initial =
      in_place ? assemble<T>(recv_blocks, outgoing) : poisoned<T>(recv_blocks.extent);
  const Operands operands = place(layout, id, rank, in_place, &send, &recv_initial);
  switch (variant) {
    case Alltoall::plain:
      check_mpi(MPI_Alltoall(operands.send_arg(), count, type.handle, operands.recv_arg(), count,
                             type.handle, MPI_COMM_WORLD),
                what);
      break;
    case Alltoall::v:
      check_mpi(MPI_Alltoallv(operands.send_arg(), send_counts.data(), send_blocks.displs.data(),
                              type.handle, operands.recv_arg(), recv_counts.data(),
                              recv_blocks.displs.data(), type.handle, MPI_COMM_WORLD),
                what);
      break;
    case Alltoall::w: {
      // Alltoallw takes displacements in bytes and a datatype per peer.
      std::vector<int> send_bytes(ranks);
      std::vector<int> recv_bytes(ranks);
      for (int peer = 0; peer < ranks; ++peer) {
        send_bytes[peer] = send_blocks.displs[peer] * int(sizeof(T));
        recv_bytes[peer] = recv_blocks.displs[peer] * int(sizeof(T));
      }
      const std::vector<MPI_Datatype> types(ranks, type.handle);
      check_mpi(MPI_Alltoallw(operands.send_arg(), send_counts.data(), send_bytes.data(),
                              types.data(), operands.recv_arg(), recv_counts.data(),
                              recv_bytes.data(), types.data(), MPI_COMM_WORLD),
                what);
      break;
    }
  }
  check_operands(what, operands, assemble<T>(recv_blocks, incoming), &send);
}

template <class T>
void test_all_calls(const Datatype& type, long count, Layout layout) {
  test_bcast<T>(type, count, layout);
  for (bool vector_variant : {false, true}) {
    test_gather<T>(type, count, layout, vector_variant);
    test_scatter<T>(type, count, layout, vector_variant);
    test_allgather<T>(type, count, layout, vector_variant);
  }
  for (Alltoall variant : {Alltoall::plain, Alltoall::v, Alltoall::w}) {
    test_alltoall<T>(type, count, layout, variant);
  }
}

template <class T>
void test_type(const Datatype& type) {
  for (long count : kCounts) {
    for (Layout layout : kLayouts) test_all_calls<T>(type, count, layout);
  }
}

void test_large_counts() {
  // Above 64 KiB: kernels and copies, or (FERRY_WORKER_MAX_BYTES above them)
  // shared among the engine worker's blocks.
  test_bcast<uint8_t>({MPI_UINT8_T, "MPI_UINT8_T"}, 100003, Layout::offset);
  test_alltoall<int32_t>({MPI_INT, "MPI_INT"}, 12345, Layout::offset, Alltoall::v);
  test_bcast<double>({MPI_DOUBLE, "MPI_DOUBLE"}, 1 << 20, Layout::offset);
  test_allgather<uint8_t>({MPI_UINT8_T, "MPI_UINT8_T"}, 1 << 20, Layout::device, true);
  test_alltoall<int32_t>({MPI_INT, "MPI_INT"}, 1 << 16, Layout::in_place, Alltoall::plain);
}

// MPI_Alltoallv whose send and receive displacements are negative: the
// blocks lie before the buffer arguments, in memory the caller owns. The
// whole region a call reads and writes is what must be staged or mapped.
void test_alltoallv_before_the_buffers() {
  const int ranks = world_size(), rank = world_rank();
  const int count = 13, lead = count * ranks + 3;  // every block before the arguments
  const uint64_t case_id = 0xa2a7;
  std::vector<int32_t> send_memory = poisoned<int32_t>(lead);
  std::vector<int> send_counts(ranks, count), send_displs(ranks), recv_counts(ranks, count), recv_displs(ranks);
  for (int to = 0; to < ranks; ++to) {
    const std::vector<int32_t> values = block<int32_t>(case_id, rank, to, count);
    std::copy(values.begin(), values.end(), send_memory.begin() + to * count);
    send_displs[to] = to * count - lead;
    recv_displs[to] = to * count - lead;
  }
  std::vector<int32_t> want = poisoned<int32_t>(lead);
  for (int from = 0; from < ranks; ++from) {
    const std::vector<int32_t> values = block<int32_t>(case_id, from, rank, count);
    std::copy(values.begin(), values.end(), want.begin() + from * count);
  }
  const Buffer send = make_buffer(send_memory, Memory::device);
  const Buffer recv = make_buffer(poisoned<int32_t>(lead), Memory::device);
  const Case what{"MPI_Alltoallv", "MPI_INT", "", count, "device", "displacements before the buffers"};
  check_mpi(MPI_Alltoallv(static_cast<int32_t*>(send.data()) + lead, send_counts.data(), send_displs.data(), MPI_INT,
                          static_cast<int32_t*>(recv.data()) + lead, recv_counts.data(), recv_displs.data(), MPI_INT,
                          MPI_COMM_WORLD),
            what);
  expect_buffer(what, recv, want);
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  test_type<uint8_t>({MPI_UINT8_T, "MPI_UINT8_T"});
  test_type<int32_t>({MPI_INT, "MPI_INT"});
  test_type<int64_t>({MPI_INT64_T, "MPI_INT64_T"});
  test_type<float>({MPI_FLOAT, "MPI_FLOAT"});
  test_type<double>({MPI_DOUBLE, "MPI_DOUBLE"});
  test_type<std::complex<double>>({MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX"});
  test_large_counts();
  test_alltoallv_before_the_buffers();
  return suite::finish();
}
