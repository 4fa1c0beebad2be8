// Device-buffer calls on communicators other than MPI_COMM_WORLD: an even/odd
// MPI_Comm_split with rank order reversed, MPI_COMM_SELF, and communicators
// created and freed over and over (Ferry caches per-communicator state and
// must drop it on MPI_Comm_free).
#include <algorithm>

#include "suite.h"

namespace {

using namespace suite;

const std::vector<long> kCounts = {1, 7, 1023};
const std::vector<Layout> kLayouts = {Layout::device, Layout::offset, Layout::in_place,
                                      Layout::mixed_ranks};

// A communicator under test and the world ranks of its members, in the
// communicator's rank order; rank i's data is seeded by members[i].
struct Group {
  MPI_Comm comm;
  std::string name;
  std::vector<int> members;
  int rank = 0;

  int size() const { return int(members.size()); }
};

Case case_for(const Group& group, const char* call, const Datatype& type, const char* op,
              long count, Layout layout) {
  return Case{call, type.name, op, count, layout_name(layout), "comm=" + group.name};
}

template <class T>
std::vector<T> contribution(const Group& group, uint64_t case_id, int member, long count,
                            Values kind = Values::wide) {
  return random_values<T>(count, case_id, group.members[member], kind);
}

// Buffers as `layout` says, with odd and even ranks of the communicator (not
// of the world: a split by parity would otherwise never mix) differing.
template <class T>
Operands place_in(const Group& group, Layout layout, uint64_t case_id, bool in_place,
                  const std::vector<T>& send, const std::vector<T>& recv) {
  return place(layout, case_id, group.rank, in_place, &send, &recv);
}

template <class T>
void test_allreduce(const Group& group, const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const Case what = case_for(group, "MPI_Allreduce", type, "MPI_SUM", count, layout);
  const bool in_place = layout == Layout::in_place;
  std::vector<T> expected(count, T(0));
  for (int member = 0; member < group.size(); ++member) {
    const std::vector<T> values = contribution<T>(group, id, member, count, Values::small);
    for (long i = 0; i < count; ++i) expected[i] += values[i];
  }
  const std::vector<T> mine = contribution<T>(group, id, group.rank, count, Values::small);
  const Operands operands =
      place_in(group, layout, id, in_place, mine, in_place ? mine : poisoned<T>(count));
  check_mpi(MPI_Allreduce(operands.send_arg(), operands.recv_arg(), count, type.handle, MPI_SUM,
                          group.comm),
            what);
  check_operands(what, operands, expected, &mine);
}

template <class T>
void test_reduce(const Group& group, const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int root = group.size() - 1;
  const bool is_root = group.rank == root;
  const bool in_place = is_root && layout == Layout::in_place;
  const Case what = case_for(group, "MPI_Reduce", type, "MPI_MAX", count, layout);
  std::vector<T> expected = contribution<T>(group, id, 0, count);
  for (int member = 1; member < group.size(); ++member) {
    const std::vector<T> values = contribution<T>(group, id, member, count);
    for (long i = 0; i < count; ++i) expected[i] = std::max(expected[i], values[i]);
  }
  const std::vector<T> mine = contribution<T>(group, id, group.rank, count);
  const std::vector<T> recv_initial = in_place ? mine : poisoned<T>(count);
  const Operands operands =
      place(layout, id, group.rank, in_place, &mine, is_root ? &recv_initial : nullptr);
  check_mpi(MPI_Reduce(operands.send_arg(), operands.recv_arg(), count, type.handle, MPI_MAX, root,
                       group.comm),
            what);
  check_operands(what, operands, expected, &mine);
}

template <class T>
void test_bcast(const Group& group, const Datatype& type, long count, Layout layout) {
  if (layout == Layout::in_place) return;
  const uint64_t id = next_case_id();
  const Case what = case_for(group, "MPI_Bcast", type, "", count, layout);
  const std::vector<T> data = contribution<T>(group, id, 0, count);
  const bool is_root = group.rank == 0;
  const Buffer buffer =
      make_buffer(is_root ? data : poisoned<T>(count),
                  is_root ? send_memory(layout, group.rank) : recv_memory(layout, group.rank),
                  offset_bytes(layout, sizeof(T), id));
  check_mpi(MPI_Bcast(buffer.data(), count, type.handle, 0, group.comm), what);
  expect_buffer(what, buffer, data);
}

// Blocks must land in communicator rank order, not world rank order.
template <class T>
void test_allgather(const Group& group, const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const Case what = case_for(group, "MPI_Allgather", type, "", count, layout);
  const bool in_place = layout == Layout::in_place;
  const std::vector<T> mine = contribution<T>(group, id, group.rank, count);
  std::vector<T> expected;
  for (int member = 0; member < group.size(); ++member) {
    const std::vector<T> values = contribution<T>(group, id, member, count);
    expected.insert(expected.end(), values.begin(), values.end());
  }
  std::vector<T> recv_initial = poisoned<T>(count * group.size());
  if (in_place) std::copy(mine.begin(), mine.end(), recv_initial.begin() + count * group.rank);
  const Operands operands = place_in(group, layout, id, in_place, mine, recv_initial);
  check_mpi(MPI_Allgather(operands.send_arg(), count, type.handle, operands.recv_arg(), count,
                          type.handle, group.comm),
            what);
  check_operands(what, operands, expected, &mine);
}

template <class T>
void test_alltoall(const Group& group, const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const Case what = case_for(group, "MPI_Alltoall", type, "", count, layout);
  const bool in_place = layout == Layout::in_place;
  // Member m's full send buffer; block r of it goes to rank r.
  const auto send_of = [&](int member) {
    return contribution<T>(group, id, member, count * group.size());
  };
  const std::vector<T> mine = send_of(group.rank);
  std::vector<T> expected;
  for (int member = 0; member < group.size(); ++member) {
    const std::vector<T> theirs = send_of(member);
    expected.insert(expected.end(), theirs.begin() + count * group.rank,
                    theirs.begin() + count * (group.rank + 1));
  }
  const Operands operands = place_in(group, layout, id, in_place, mine,
                                     in_place ? mine : poisoned<T>(count * group.size()));
  check_mpi(MPI_Alltoall(operands.send_arg(), count, type.handle, operands.recv_arg(), count,
                         type.handle, group.comm),
            what);
  check_operands(what, operands, expected, &mine);
}

template <class T>
void test_scan(const Group& group, const Datatype& type, long count, Layout layout,
               bool exclusive) {
  const uint64_t id = next_case_id();
  const Case what =
      case_for(group, exclusive ? "MPI_Exscan" : "MPI_Scan", type, "MPI_SUM", count, layout);
  const bool in_place = layout == Layout::in_place;
  const int ranks_reduced = exclusive ? group.rank : group.rank + 1;
  // Exscan leaves rank 0's result undefined: only its guards are checked.
  std::vector<T> expected(ranks_reduced == 0 ? 0 : count, T(0));
  for (int member = 0; member < ranks_reduced; ++member) {
    const std::vector<T> values = contribution<T>(group, id, member, count, Values::small);
    for (long i = 0; i < count; ++i) expected[i] += values[i];
  }
  const std::vector<T> mine = contribution<T>(group, id, group.rank, count, Values::small);
  const Operands operands =
      place_in(group, layout, id, in_place, mine, in_place ? mine : poisoned<T>(count));
  const auto scan = exclusive ? MPI_Exscan : MPI_Scan;
  check_mpi(scan(operands.send_arg(), operands.recv_arg(), count, type.handle, MPI_SUM, group.comm),
            what);
  check_operands(what, operands, expected, &mine);
}

// A ring within the communicator; on MPI_COMM_SELF the rank talks to itself.
// The status must name the source by its rank in the communicator.
template <class T>
void test_sendrecv(const Group& group, const Datatype& type, long count, Layout layout) {
  if (layout == Layout::in_place) return;
  const uint64_t id = next_case_id();
  const Case what = case_for(group, "MPI_Sendrecv", type, "", count, layout);
  const int dest = (group.rank + 1) % group.size();
  const int source = (group.rank + group.size() - 1) % group.size();
  const int tag = int(id % 16000);
  const std::vector<T> mine = contribution<T>(group, id, group.rank, count);
  const std::vector<T> untouched = poisoned<T>(count);
  const Operands operands = place_in(group, layout, id, false, mine, untouched);
  MPI_Status status;
  check_mpi(MPI_Sendrecv(operands.send_arg(), count, type.handle, dest, tag, operands.recv_arg(),
                         count, type.handle, source, tag, group.comm, &status),
            what);
  check_operands(what, operands, contribution<T>(group, id, source, count), &mine);
  expect_status(what, status, type.handle, int(count), source, tag);
}

template <class T>
void test_group_with(const Group& group, const Datatype& type) {
  for (long count : kCounts) {
    for (Layout layout : kLayouts) {
      test_allreduce<T>(group, type, count, layout);
      test_reduce<T>(group, type, count, layout);
      test_bcast<T>(group, type, count, layout);
      test_allgather<T>(group, type, count, layout);
      test_alltoall<T>(group, type, count, layout);
      test_scan<T>(group, type, count, layout, false);
      test_scan<T>(group, type, count, layout, true);
      test_sendrecv<T>(group, type, count, layout);
    }
  }
}

void test_group(const Group& group) {
  test_group_with<int32_t>(group, {MPI_INT, "MPI_INT"});
  test_group_with<double>(group, {MPI_DOUBLE, "MPI_DOUBLE"});
}

// Even and odd world ranks apart, each half ordered by descending world rank.
void test_split() {
  const int world = world_rank();
  MPI_Comm half;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, world % 2, -world, &half),
            Case{"MPI_Comm_split", "", "", 0});
  Group group{half, world % 2 ? "odd ranks, reversed" : "even ranks, reversed", {}};
  for (int member = world_size() - 1; member >= 0; --member) {
    if (member % 2 == world % 2) group.members.push_back(member);
  }
  MPI_Comm_rank(half, &group.rank);
  const int expected_rank =
      int(std::find(group.members.begin(), group.members.end(), world) - group.members.begin());
  expect(group.rank == expected_rank, Case{"MPI_Comm_split", "", "", 0, "", "comm=" + group.name},
         "rank " + std::to_string(group.rank) + " in the split, expected " +
             std::to_string(expected_rank));
  test_group(group);
  MPI_Comm_free(&half);
}

void test_self() { test_group(Group{MPI_COMM_SELF, "MPI_COMM_SELF", {world_rank()}, 0}); }

// Communicators that come and go, each used once with device buffers.
void test_create_and_free() {
  for (int round = 0; round < 4; ++round) {
    MPI_Comm copy;
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &copy), Case{"MPI_Comm_dup", "", "", 0});
    std::vector<int> members(world_size());
    for (int rank = 0; rank < world_size(); ++rank) members[rank] = rank;
    Group group{copy, "dup of MPI_COMM_WORLD, round " + std::to_string(round), members,
                world_rank()};
    test_allreduce<int32_t>(group, {MPI_INT, "MPI_INT"}, 1023, Layout::device);
    test_allgather<double>(group, {MPI_DOUBLE, "MPI_DOUBLE"}, 7, Layout::device);
    MPI_Comm_free(&copy);
  }
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  test_split();
  test_self();
  test_create_and_free();
  return suite::finish();
}
