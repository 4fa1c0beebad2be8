// Derived datatypes on device buffers: a strided vector with holes, a
// contiguous type and a padded struct, through MPI_Bcast, MPI_Allgather,
// MPI_Send/MPI_Recv (also against a different but matching type signature)
// and MPI_Alltoallw with a different datatype per peer. Every byte is
// checked: data where the type has data, and holes left exactly as they were.
#include <cstddef>

#include "suite.h"

namespace {

using namespace suite;

const std::vector<long> kCounts = {0, 1, 7, 1023};
const std::vector<Layout> kLayouts = {Layout::device, Layout::offset, Layout::in_place,
                                      Layout::mixed_ranks, Layout::mixed_sides};

// What a receive buffer holds before the call, and what a sender keeps in
// the holes of its own buffer: neither may ever show up in a received hole.
constexpr uint8_t kPoisonByte = 0xA5;
constexpr uint8_t kSenderHoleByte = 0x5A;

// A datatype and, per byte of its extent, whether the byte carries data.
// Data bytes appear in address order in the type map of every type here, so
// packing is reading them in order.
struct MappedType {
  std::string name;
  MPI_Datatype handle;
  size_t extent;
  std::vector<bool> is_data;
};

struct Particle {
  int32_t id;
  double position[2];
  uint8_t flags;
};

std::vector<bool> data_ranges(size_t extent,
                              std::initializer_list<std::pair<size_t, size_t>> ranges) {
  std::vector<bool> is_data(extent, false);
  for (const auto& [first, length] : ranges) {
    for (size_t i = first; i < first + length; ++i) is_data[i] = true;
  }
  return is_data;
}

std::vector<MappedType> create_types() {
  std::vector<MappedType> types;

  // Three blocks of two ints, stride three, resized to nine ints: holes at
  // ints 2, 5 and 8 of every element.
  MPI_Datatype strided;
  MPI_Datatype vector;
  MPI_Type_vector(3, 2, 3, MPI_INT, &strided);
  MPI_Type_create_resized(strided, 0, 9 * sizeof(int), &vector);
  MPI_Type_free(&strided);
  MPI_Type_commit(&vector);
  types.push_back({"vector(3x2 ints, stride 3, extent 9 ints)", vector, 9 * sizeof(int),
                   data_ranges(36, {{0, 8}, {12, 8}, {24, 8}})});

  MPI_Datatype contiguous;
  MPI_Type_contiguous(3, MPI_DOUBLE, &contiguous);
  MPI_Type_commit(&contiguous);
  types.push_back({"contiguous(3 doubles)", contiguous, 24, data_ranges(24, {{0, 24}})});

  // The compiler's padding after `id` and after `flags` are the holes.
  const int lengths[] = {1, 2, 1};
  const MPI_Aint displacements[] = {offsetof(Particle, id), offsetof(Particle, position),
                                    offsetof(Particle, flags)};
  const MPI_Datatype members[] = {MPI_INT32_T, MPI_DOUBLE, MPI_UINT8_T};
  MPI_Datatype packed_struct;
  MPI_Datatype particle;
  MPI_Type_create_struct(3, lengths, displacements, members, &packed_struct);
  MPI_Type_create_resized(packed_struct, 0, sizeof(Particle), &particle);
  MPI_Type_free(&packed_struct);
  MPI_Type_commit(&particle);
  types.push_back({"struct{int32; double[2]; uint8}", particle, sizeof(Particle),
                   data_ranges(sizeof(Particle), {{offsetof(Particle, id), 4},
                                                  {offsetof(Particle, position), 16},
                                                  {offsetof(Particle, flags), 1}})});

  // A predefined type, so Alltoallw also mixes basic and derived types.
  types.push_back({"MPI_DOUBLE", MPI_DOUBLE, 8, data_ranges(8, {{0, 8}})});
  return types;
}

void free_types(std::vector<MappedType>& types) {
  for (MappedType& type : types) {
    if (type.name != "MPI_DOUBLE") MPI_Type_free(&type.handle);
  }
}

// `count` elements as their sender holds them: random data, holes marked.
std::vector<uint8_t> sender_bytes(const MappedType& type, long count, uint64_t case_id, int seed) {
  std::vector<uint8_t> bytes =
      random_values<uint8_t>(count * type.extent, case_id, seed, Values::bits);
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!type.is_data[i % type.extent]) bytes[i] = kSenderHoleByte;
  }
  return bytes;
}

// The data bytes of `count` elements starting at `elements`, in order.
std::vector<uint8_t> pack(const MappedType& type, const uint8_t* elements, long count) {
  std::vector<uint8_t> packed;
  for (size_t i = 0; i < count * type.extent; ++i) {
    if (type.is_data[i % type.extent]) packed.push_back(elements[i]);
  }
  return packed;
}

// Writes `packed` into the data bytes of the elements at `elements`, in order,
// as far as it goes; holes keep what they held.
void unpack(const MappedType& type, const std::vector<uint8_t>& packed, uint8_t* elements) {
  size_t next = 0;
  for (size_t i = 0; next < packed.size(); ++i) {
    if (type.is_data[i % type.extent]) elements[i] = packed[next++];
  }
}

// `target` after receiving `count` elements of `source` at byte `at`.
std::vector<uint8_t> received(const MappedType& type, std::vector<uint8_t> target, size_t at,
                              const std::vector<uint8_t>& source, long count) {
  unpack(type, pack(type, source.data(), count), target.data() + at);
  return target;
}

Case case_for(const char* call, const MappedType& type, long count, Layout layout,
              const std::string& detail = "") {
  return Case{call, type.name, "", count, layout_name(layout), detail};
}

void test_bcast(const MappedType& type, long count, Layout layout) {
  if (layout == Layout::in_place) return;  // MPI_Bcast has a single buffer.
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int root = int(id % world_size());
  const Case what = case_for("MPI_Bcast", type, count, layout, "root=" + std::to_string(root));
  const std::vector<uint8_t> sent = sender_bytes(type, count, id, root);
  const std::vector<uint8_t> untouched(sent.size(), kPoisonByte);
  const bool is_root = rank == root;
  const Buffer buffer = make_buffer(is_root ? sent : untouched,
                                    is_root ? send_memory(layout, rank) : recv_memory(layout, rank),
                                    offset_bytes(layout, type.extent, id));
  check_mpi(MPI_Bcast(buffer.data(), count, type.handle, root, MPI_COMM_WORLD), what);
  expect_buffer(what, buffer, is_root ? sent : received(type, untouched, 0, sent, count));
}

void test_allgather(const MappedType& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int ranks = world_size();
  const bool in_place = layout == Layout::in_place;
  const Case what = case_for("MPI_Allgather", type, count, layout);
  const size_t block_bytes = count * type.extent;
  const std::vector<uint8_t> mine = sender_bytes(type, count, id, rank);
  std::vector<uint8_t> recv_initial(block_bytes * ranks, kPoisonByte);
  if (in_place) std::copy(mine.begin(), mine.end(), recv_initial.begin() + block_bytes * rank);
  std::vector<uint8_t> expected = recv_initial;
  for (int from = 0; from < ranks; ++from) {
    expected =
        received(type, expected, block_bytes * from, sender_bytes(type, count, id, from), count);
  }
  const Operands operands = place(layout, id, rank, in_place, &mine, &recv_initial);
  check_mpi(MPI_Allgather(operands.send_arg(), count, type.handle, operands.recv_arg(), count,
                          type.handle, MPI_COMM_WORLD),
            what);
  check_operands(what, operands, expected, &mine);
}

// One message between a pair of ranks: `sent` goes out as `send_count` of
// `send_type` and is received into room for `recv_capacity` of `recv_type`.
// The receiver expects `expected` and `recv_count` elements in its status
// (MPI_UNDEFINED when the message ends inside an element).
void exchange(const Case& what, Layout layout, uint64_t id, const std::vector<uint8_t>& sent,
              const MappedType& send_type, long send_count, const MappedType& recv_type,
              long recv_capacity, const std::vector<uint8_t>& expected, int recv_count) {
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % 16000);
  if (rank == pair.source) {
    const Buffer send =
        make_buffer(sent, send_memory(layout, rank), offset_bytes(layout, send_type.extent, id));
    check_mpi(MPI_Send(send.data(), send_count, send_type.handle, pair.dest, tag, MPI_COMM_WORLD),
              what);
    Case send_case = what;
    send_case.detail += " (send buffer)";
    expect_buffer(send_case, send, sent);
  } else if (rank == pair.dest) {
    const std::vector<uint8_t> untouched(recv_capacity * recv_type.extent, kPoisonByte);
    const Buffer recv = make_buffer(untouched, recv_memory(layout, rank),
                                    offset_bytes(layout, recv_type.extent, id));
    MPI_Status status;
    check_mpi(MPI_Recv(recv.data(), recv_capacity, recv_type.handle, pair.source, tag,
                       MPI_COMM_WORLD, &status),
              what);
    expect_buffer(what, recv, expected);
    expect_status(what, status, recv_type.handle, recv_count, pair.source, tag);
  }
}

void test_send_recv(const MappedType& type, long count, Layout layout) {
  if (layout == Layout::in_place) return;
  const uint64_t id = next_case_id();
  const std::vector<uint8_t> sent = sender_bytes(type, count, id, pair_for(id).source);
  // One element of room more than arrives: it must stay untouched.
  const std::vector<uint8_t> untouched((count + 1) * type.extent, kPoisonByte);
  exchange(case_for("MPI_Send+MPI_Recv", type, count, layout), layout, id, sent, type, count, type,
           count + 1, received(type, untouched, 0, sent, count), int(count));
}

// Sender and receiver use different types with the same signature: the
// vector's ints arrive as plain MPI_INT, and plain ints fill a vector.
void test_signature_match(const MappedType& vector, long count, Layout layout) {
  if (layout == Layout::in_place) return;
  const MappedType ints{"MPI_INT", MPI_INT, sizeof(int), {true, true, true, true}};
  const long ints_per_vector = 6;
  {
    const uint64_t id = next_case_id();
    const std::vector<uint8_t> sent = sender_bytes(vector, count, id, pair_for(id).source);
    exchange(case_for("MPI_Send+MPI_Recv", vector, count, layout, "received as MPI_INT"), layout,
             id, sent, vector, count, ints, count * ints_per_vector,
             pack(vector, sent.data(), count), int(count * ints_per_vector));
  }
  {
    const uint64_t id = next_case_id();
    const std::vector<uint8_t> sent =
        sender_bytes(ints, count * ints_per_vector, id, pair_for(id).source);
    std::vector<uint8_t> expected(count * vector.extent, kPoisonByte);
    unpack(vector, sent, expected.data());
    exchange(case_for("MPI_Send+MPI_Recv", vector, count, layout, "sent as MPI_INT"), layout, id,
             sent, ints, count * ints_per_vector, vector, count, expected, int(count));
  }
}

// Seven ints into room for two vectors: the message ends inside the second
// element, so MPI_Get_count reports MPI_UNDEFINED and MPI_Get_elements 7.
void test_partial_element(const MappedType& vector, Layout layout) {
  if (layout == Layout::in_place) return;
  const MappedType ints{"MPI_INT", MPI_INT, sizeof(int), {true, true, true, true}};
  const uint64_t id = next_case_id();
  const long sent_ints = 7;
  const std::vector<uint8_t> sent = sender_bytes(ints, sent_ints, id, pair_for(id).source);
  std::vector<uint8_t> expected(2 * vector.extent, kPoisonByte);
  unpack(vector, sent, expected.data());
  const Case what = case_for("MPI_Send+MPI_Recv", vector, 2, layout, "7 ints into 2 vectors");
  exchange(what, layout, id, sent, ints, sent_ints, vector, 2, expected, MPI_UNDEFINED);
}

// Every pair of ranks exchanges through a different datatype and count, laid
// out in peer order with an 8-byte gap after each block.
void test_alltoallw(const std::vector<MappedType>& types, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int ranks = world_size();
  const bool in_place = layout == Layout::in_place;
  // MPICH 4.0.2 truncates this in-place exchange, host buffers too.
  if (in_place && mpich_4()) return;
  const Case what{"MPI_Alltoallw", "per-peer mix", "", count, layout_name(layout)};
  // Symmetric in the two ranks, as MPI_IN_PLACE requires.
  const auto type_between = [&](int a, int b) -> const MappedType& {
    return types[(a + b) % types.size()];
  };
  const auto count_between = [&](int a, int b) {
    return count == 0 ? 0 : int(count) + (a + b) % 2;
  };
  std::vector<int> counts(ranks);
  std::vector<int> displs(ranks);
  std::vector<MPI_Datatype> handles(ranks);
  size_t extent = 0;
  for (int peer = 0; peer < ranks; ++peer) {
    counts[peer] = count_between(rank, peer);
    handles[peer] = type_between(rank, peer).handle;
    displs[peer] = int(extent);
    extent += counts[peer] * type_between(rank, peer).extent + 8;
  }
  const auto block = [&](int from, int to) {
    return sender_bytes(type_between(from, to), count_between(from, to), id, from * ranks + to);
  };
  // Outgoing blocks sit where the blocks from the same peers arrive: the
  // layout MPI_IN_PLACE needs.
  std::vector<uint8_t> send(extent, kPoisonByte);
  for (int peer = 0; peer < ranks; ++peer) {
    const std::vector<uint8_t> outgoing = block(rank, peer);
    std::copy(outgoing.begin(), outgoing.end(), send.begin() + displs[peer]);
  }
  const std::vector<uint8_t> recv_initial =
      in_place ? send : std::vector<uint8_t>(extent, kPoisonByte);
  std::vector<uint8_t> expected = recv_initial;
  for (int peer = 0; peer < ranks; ++peer) {
    expected = received(type_between(peer, rank), expected, displs[peer], block(peer, rank),
                        count_between(peer, rank));
  }
  const Operands operands = place(layout, id, rank, in_place, &send, &recv_initial);
  check_mpi(MPI_Alltoallw(operands.send_arg(), counts.data(), displs.data(), handles.data(),
                          operands.recv_arg(), counts.data(), displs.data(), handles.data(),
                          MPI_COMM_WORLD),
            what);
  check_operands(what, operands, expected, &send);
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  std::vector<MappedType> types = create_types();
  const MappedType& vector = types[0];
  for (long count : kCounts) {
    for (Layout layout : kLayouts) {
      for (const MappedType& type : types) {
        test_bcast(type, count, layout);
        test_allgather(type, count, layout);
        test_send_recv(type, count, layout);
      }
      test_signature_match(vector, count, layout);
      test_alltoallw(types, count, layout);
    }
  }
  for (Layout layout : kLayouts) test_partial_element(vector, layout);
  free_types(types);
  return suite::finish();
}
