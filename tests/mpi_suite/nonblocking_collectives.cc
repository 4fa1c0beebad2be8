// Nonblocking collectives on device buffers: MPI_Iallreduce, MPI_Ireduce,
// MPI_Ibcast, MPI_Iallgather(v), MPI_Igather(v), MPI_Iscatter(v),
// MPI_Ialltoall(v), MPI_Ireduce_scatter_block, MPI_Iscan and MPI_Iexscan, in
// place where MPI allows it, with root-only buffers, on MPI_COMM_WORLD, on a
// split communicator with reversed rank order, and (Ibcast, Ireduce,
// Iallreduce, Iallgather) on an intercommunicator. Each round posts every
// call at once, next to an MPI_Ibarrier and a host-buffer MPI_Iallreduce
// that Ferry does not stage, and completes them all in one array with one
// of the completion calls; then every receive buffer, the gaps the calls
// must not write, and every send buffer are checked against host references.
#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "completion.h"
#include "suite.h"

namespace {

using namespace suite;

const std::vector<long> kCounts = {0, 1, 7, 1023};
const std::vector<Layout> kLayouts = {Layout::device, Layout::offset, Layout::in_place,
                                      Layout::mixed_ranks, Layout::mixed_sides};

// A communicator and the world ranks of its members in its rank order; an
// intercommunicator also names the remote group's members.
struct Group {
  MPI_Comm comm;
  std::string name;
  std::vector<int> members;
  int rank = 0;
  std::vector<int> remote{};

  int size() const { return int(members.size()); }
};

// Posted requests and the checks to run once they are complete.
class Batch {
 public:
  void add(MPI_Request request, std::function<void()> check) {
    requests_.push_back(request);
    checks_.push_back(std::move(check));
  }
  void finish(Completion how, const Case& what) {
    complete(how, requests_, what);
    for (auto& check : checks_) check();
  }

 private:
  std::vector<MPI_Request> requests_;
  std::vector<std::function<void()>> checks_;
};

// What one rank contributes to a case: seeded by its world rank.
template <class T>
std::vector<T> data_of(uint64_t id, int world, long count, Values kind = Values::wide) {
  return random_values<T>(count, id, world, kind);
}

template <class T>
std::vector<T> slice(const std::vector<T>& values, long first, long count) {
  return std::vector<T>(values.begin() + first, values.begin() + first + count);
}

// Adds the check of `operands` against `expected` (and of the send buffer
// against `sent`) after the request completes.
template <class T>
void track(Batch& batch, const Case& what, MPI_Request request, std::shared_ptr<Operands> operands,
           std::vector<T> expected, std::vector<T> sent) {
  batch.add(request, [what, operands, expected = std::move(expected), sent = std::move(sent)] {
    check_operands(what, *operands, expected, &sent);
  });
}

template <class T>
std::shared_ptr<Operands> placed(Layout layout, uint64_t id, int rank, bool in_place,
                                 const std::vector<T>* send, const std::vector<T>* recv) {
  return std::make_shared<Operands>(place(layout, id, rank, in_place, send, recv));
}

// counts + displacements with a gap of `gap` elements after every block.
struct Blocks {
  std::vector<int> counts, displs;
  long total = 0;  // elements the buffer spans, gaps included
};

Blocks with_gaps(std::vector<int> counts, int gap) {
  Blocks blocks{std::move(counts), {}, 0};
  for (int count : blocks.counts) {
    blocks.displs.push_back(int(blocks.total));
    blocks.total += count + gap;
  }
  return blocks;
}

// ---- Intracommunicator calls ------------------------------------------------

template <class T>
void post_iallreduce(Batch& batch, const Group& g, const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Iallreduce", type.name, "MPI_SUM", count, layout_name(layout), "comm=" + g.name};
  const bool in_place = layout == Layout::in_place;
  std::vector<T> expected(count, T(0));
  for (int m : g.members) {
    const std::vector<T> v = data_of<T>(id, m, count, Values::small);
    for (long i = 0; i < count; ++i) expected[i] += v[i];
  }
  const std::vector<T> mine = data_of<T>(id, g.members[g.rank], count, Values::small);
  const std::vector<T> initial = in_place ? mine : poisoned<T>(count);
  auto ops = placed(layout, id, g.rank, in_place, &mine, &initial);
  MPI_Request request;
  check_mpi(MPI_Iallreduce(ops->send_arg(), ops->recv_arg(), int(count), type.handle, MPI_SUM, g.comm,
                           &request),
            what);
  track(batch, what, request, ops, expected, mine);
}

template <class T>
void post_ireduce(Batch& batch, const Group& g, const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int root = int(id % uint64_t(g.size()));
  const bool is_root = g.rank == root;
  const bool in_place = is_root && layout == Layout::in_place;
  const Case what{"MPI_Ireduce", type.name, "MPI_MAX", count, layout_name(layout),
                  "comm=" + g.name + " root=" + std::to_string(root)};
  std::vector<T> expected = data_of<T>(id, g.members[0], count);
  for (int m : g.members) {
    const std::vector<T> v = data_of<T>(id, m, count);
    for (long i = 0; i < count; ++i) expected[i] = std::max(expected[i], v[i]);
  }
  const std::vector<T> mine = data_of<T>(id, g.members[g.rank], count);
  const std::vector<T> initial = in_place ? mine : poisoned<T>(count);
  auto ops = placed(layout, id, g.rank, in_place, &mine, is_root ? &initial : nullptr);
  MPI_Request request;
  check_mpi(MPI_Ireduce(ops->send_arg(), ops->recv_arg(), int(count), type.handle, MPI_MAX, root,
                        g.comm, &request),
            what);
  track(batch, what, request, ops, is_root ? expected : std::vector<T>{}, mine);
}

template <class T>
void post_ibcast(Batch& batch, const Group& g, const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int root = int((id + 1) % uint64_t(g.size()));
  const Case what{"MPI_Ibcast", type.name, "", count, layout_name(layout),
                  "comm=" + g.name + " root=" + std::to_string(root)};
  const std::vector<T> data = data_of<T>(id, g.members[root], count);
  const bool is_root = g.rank == root;
  if (layout == Layout::in_place) layout = Layout::device;
  auto ops = std::make_shared<Operands>();
  ops->recv.emplace(make_buffer(is_root ? data : poisoned<T>(count),
                                is_root ? send_memory(layout, g.rank) : recv_memory(layout, g.rank),
                                offset_bytes(layout, sizeof(T), id)));
  MPI_Request request;
  check_mpi(MPI_Ibcast(ops->recv_arg(), int(count), type.handle, root, g.comm, &request), what);
  track(batch, what, request, ops, data, std::vector<T>{});
}

template <class T>
void post_iallgather(Batch& batch, const Group& g, const Datatype& type, long count, Layout layout,
                     bool varying) {
  const uint64_t id = next_case_id();
  const Case what{varying ? "MPI_Iallgatherv" : "MPI_Iallgather", type.name, "", count,
                  layout_name(layout), "comm=" + g.name};
  const bool in_place = layout == Layout::in_place;
  const Blocks blocks = with_gaps(varying ? uneven_counts(count, g.size())
                                          : std::vector<int>(g.size(), int(count)),
                                  varying ? 1 : 0);
  const long mine_count = blocks.counts[g.rank];
  std::vector<T> expected = poisoned<T>(blocks.total);
  for (int p = 0; p < g.size(); ++p) {
    const std::vector<T> v = data_of<T>(id, g.members[p], blocks.counts[p]);
    std::copy(v.begin(), v.end(), expected.begin() + blocks.displs[p]);
  }
  const std::vector<T> mine = data_of<T>(id, g.members[g.rank], mine_count);
  std::vector<T> initial = poisoned<T>(blocks.total);
  if (in_place) std::copy(mine.begin(), mine.end(), initial.begin() + blocks.displs[g.rank]);
  auto ops = placed(layout, id, g.rank, in_place, &mine, &initial);
  MPI_Request request;
  if (varying) {
    check_mpi(MPI_Iallgatherv(ops->send_arg(), int(mine_count), type.handle, ops->recv_arg(),
                              blocks.counts.data(), blocks.displs.data(), type.handle, g.comm,
                              &request),
              what);
  } else {
    check_mpi(MPI_Iallgather(ops->send_arg(), int(count), type.handle, ops->recv_arg(), int(count),
                             type.handle, g.comm, &request),
              what);
  }
  // The counts and displacements must outlive the request.
  auto keep = std::make_shared<Blocks>(blocks);
  batch.add(request, [what, ops, expected, mine, keep] { check_operands(what, *ops, expected, &mine); });
}

template <class T>
void post_igather(Batch& batch, const Group& g, const Datatype& type, long count, Layout layout,
                  bool varying) {
  const uint64_t id = next_case_id();
  const int root = int((id + 2) % uint64_t(g.size()));
  const bool is_root = g.rank == root;
  const bool in_place = is_root && layout == Layout::in_place;
  const Case what{varying ? "MPI_Igatherv" : "MPI_Igather", type.name, "", count, layout_name(layout),
                  "comm=" + g.name + " root=" + std::to_string(root)};
  auto blocks = std::make_shared<Blocks>(with_gaps(
      varying ? uneven_counts(count, g.size()) : std::vector<int>(g.size(), int(count)), varying ? 2 : 0));
  const long mine_count = blocks->counts[g.rank];
  std::vector<T> expected = poisoned<T>(blocks->total);
  for (int p = 0; p < g.size(); ++p) {
    const std::vector<T> v = data_of<T>(id, g.members[p], blocks->counts[p]);
    std::copy(v.begin(), v.end(), expected.begin() + blocks->displs[p]);
  }
  const std::vector<T> mine = data_of<T>(id, g.members[g.rank], mine_count);
  std::vector<T> initial = poisoned<T>(blocks->total);
  if (in_place) std::copy(mine.begin(), mine.end(), initial.begin() + blocks->displs[g.rank]);
  auto ops = placed(layout, id, g.rank, in_place, &mine, is_root ? &initial : nullptr);
  MPI_Request request;
  if (varying) {
    check_mpi(MPI_Igatherv(ops->send_arg(), int(mine_count), type.handle, ops->recv_arg(),
                           blocks->counts.data(), blocks->displs.data(), type.handle, root, g.comm,
                           &request),
              what);
  } else {
    check_mpi(MPI_Igather(ops->send_arg(), int(count), type.handle, ops->recv_arg(), int(count),
                          type.handle, root, g.comm, &request),
              what);
  }
  const std::vector<T> want = is_root ? expected : std::vector<T>{};
  batch.add(request, [what, ops, want, mine, blocks] { check_operands(what, *ops, want, &mine); });
}

template <class T>
void post_iscatter(Batch& batch, const Group& g, const Datatype& type, long count, Layout layout,
                   bool varying) {
  const uint64_t id = next_case_id();
  const int root = int((id + 3) % uint64_t(g.size()));
  const bool is_root = g.rank == root;
  const bool in_place = is_root && layout == Layout::in_place;
  const Case what{varying ? "MPI_Iscatterv" : "MPI_Iscatter", type.name, "", count, layout_name(layout),
                  "comm=" + g.name + " root=" + std::to_string(root)};
  auto blocks = std::make_shared<Blocks>(with_gaps(
      varying ? uneven_counts(count, g.size()) : std::vector<int>(g.size(), int(count)), varying ? 1 : 0));
  const long mine_count = blocks->counts[g.rank];
  const std::vector<T> all = data_of<T>(id, g.members[root], blocks->total);
  const std::vector<T> expected = slice(all, blocks->displs[g.rank], mine_count);
  const std::vector<T> initial = poisoned<T>(mine_count);
  // In place the root's send buffer is all it has; place() puts that in recv.
  auto ops = std::make_shared<Operands>();
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  if (is_root) ops->send.emplace(make_buffer(all, in_place ? Memory::device : send_memory(layout, g.rank), offset));
  if (!in_place) ops->recv.emplace(make_buffer(initial, recv_memory(layout, g.rank), offset));
  void* recv_arg = in_place ? MPI_IN_PLACE : ops->recv_arg();
  MPI_Request request;
  if (varying) {
    check_mpi(MPI_Iscatterv(ops->send_arg(), blocks->counts.data(), blocks->displs.data(), type.handle,
                            recv_arg, int(mine_count), type.handle, root, g.comm, &request),
              what);
  } else {
    check_mpi(MPI_Iscatter(ops->send_arg(), int(count), type.handle, recv_arg, int(count), type.handle,
                           root, g.comm, &request),
              what);
  }
  batch.add(request, [what, ops, expected, all, blocks] { check_operands(what, *ops, expected, &all); });
}

template <class T>
void post_ialltoall(Batch& batch, const Group& g, const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Ialltoall", type.name, "", count, layout_name(layout), "comm=" + g.name};
  const bool in_place = layout == Layout::in_place;
  const long total = count * g.size();
  std::vector<T> expected;
  for (int p = 0; p < g.size(); ++p) {
    const std::vector<T> v = data_of<T>(id, g.members[p], total);
    expected.insert(expected.end(), v.begin() + g.rank * count, v.begin() + (g.rank + 1) * count);
  }
  const std::vector<T> mine = data_of<T>(id, g.members[g.rank], total);
  const std::vector<T> initial = in_place ? mine : poisoned<T>(total);
  auto ops = placed(layout, id, g.rank, in_place, &mine, &initial);
  MPI_Request request;
  check_mpi(MPI_Ialltoall(ops->send_arg(), int(count), type.handle, ops->recv_arg(), int(count),
                          type.handle, g.comm, &request),
            what);
  track(batch, what, request, ops, expected, mine);
}

template <class T>
void post_ialltoallv(Batch& batch, const Group& g, const Datatype& type, long count, Layout layout) {
  if (layout == Layout::in_place) return;
  const uint64_t id = next_case_id();
  const Case what{"MPI_Ialltoallv", type.name, "", count, layout_name(layout), "comm=" + g.name};
  const int n = g.size();
  auto sent_count = [&](int from, int to) { return count == 0 ? 0 : int(count) + (from + 2 * to) % 3; };
  auto send_blocks = [&](int from) {
    std::vector<int> counts(n);
    for (int to = 0; to < n; ++to) counts[to] = sent_count(from, to);
    return with_gaps(counts, 1);
  };
  std::vector<int> recv_counts(n);
  for (int from = 0; from < n; ++from) recv_counts[from] = sent_count(from, g.rank);
  auto layouts = std::make_shared<std::pair<Blocks, Blocks>>(send_blocks(g.rank), with_gaps(recv_counts, 2));
  const Blocks& sends = layouts->first;
  const Blocks& recvs = layouts->second;
  std::vector<T> expected = poisoned<T>(recvs.total);
  for (int from = 0; from < n; ++from) {
    const Blocks theirs = send_blocks(from);
    const std::vector<T> v = data_of<T>(id, g.members[from], theirs.total);
    std::copy(v.begin() + theirs.displs[g.rank], v.begin() + theirs.displs[g.rank] + recv_counts[from],
              expected.begin() + recvs.displs[from]);
  }
  const std::vector<T> mine = data_of<T>(id, g.members[g.rank], sends.total);
  const std::vector<T> initial = poisoned<T>(recvs.total);
  auto ops = placed(layout, id, g.rank, false, &mine, &initial);
  MPI_Request request;
  check_mpi(MPI_Ialltoallv(ops->send_arg(), sends.counts.data(), sends.displs.data(), type.handle,
                           ops->recv_arg(), recvs.counts.data(), recvs.displs.data(), type.handle, g.comm,
                           &request),
            what);
  batch.add(request, [what, ops, expected, mine, layouts] { check_operands(what, *ops, expected, &mine); });
}

template <class T>
void post_ireduce_scatter_block(Batch& batch, const Group& g, const Datatype& type, long count,
                                Layout layout) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Ireduce_scatter_block", type.name, "MPI_SUM", count, layout_name(layout),
                  "comm=" + g.name};
  const bool in_place = layout == Layout::in_place;
  const long total = count * g.size();
  std::vector<T> sum(total, T(0));
  for (int m : g.members) {
    const std::vector<T> v = data_of<T>(id, m, total, Values::small);
    for (long i = 0; i < total; ++i) sum[i] += v[i];
  }
  const std::vector<T> mine = data_of<T>(id, g.members[g.rank], total, Values::small);
  // In place the result lands in the first block of the whole vector.
  const std::vector<T> initial = in_place ? mine : poisoned<T>(count);
  auto ops = placed(layout, id, g.rank, in_place, &mine, &initial);
  MPI_Request request;
  check_mpi(MPI_Ireduce_scatter_block(ops->send_arg(), ops->recv_arg(), int(count), type.handle, MPI_SUM,
                                      g.comm, &request),
            what);
  track(batch, what, request, ops, slice(sum, g.rank * count, count), mine);
}

template <class T>
void post_iscan(Batch& batch, const Group& g, const Datatype& type, long count, Layout layout,
                bool exclusive) {
  const uint64_t id = next_case_id();
  const Case what{exclusive ? "MPI_Iexscan" : "MPI_Iscan", type.name, "MPI_SUM", count,
                  layout_name(layout), "comm=" + g.name};
  const bool in_place = layout == Layout::in_place;
  std::vector<T> expected(count, T(0));
  const int last = exclusive ? g.rank - 1 : g.rank;
  for (int p = 0; p <= last; ++p) {
    const std::vector<T> v = data_of<T>(id, g.members[p], count, Values::small);
    for (long i = 0; i < count; ++i) expected[i] += v[i];
  }
  // MPI leaves Exscan's result on rank 0 undefined: only its guards are checked.
  if (exclusive && g.rank == 0) expected.clear();
  const std::vector<T> mine = data_of<T>(id, g.members[g.rank], count, Values::small);
  const std::vector<T> initial = in_place ? mine : poisoned<T>(count);
  auto ops = placed(layout, id, g.rank, in_place, &mine, &initial);
  MPI_Request request;
  if (exclusive) {
    check_mpi(MPI_Iexscan(ops->send_arg(), ops->recv_arg(), int(count), type.handle, MPI_SUM, g.comm,
                          &request),
              what);
  } else {
    check_mpi(MPI_Iscan(ops->send_arg(), ops->recv_arg(), int(count), type.handle, MPI_SUM, g.comm,
                        &request),
              what);
  }
  track(batch, what, request, ops, expected, mine);
}

// A request Ferry does not stage, completed in the same array: a host
// MPI_Iallreduce, and an MPI_Ibarrier.
void post_host_requests(Batch& batch, const Group& g) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Iallreduce", "MPI_INT", "MPI_SUM", 5, "host", "comm=" + g.name};
  std::vector<int> expected(5, 0);
  for (int m : g.members) {
    const std::vector<int> v = data_of<int>(id, m, 5, Values::small);
    for (int i = 0; i < 5; ++i) expected[i] += v[i];
  }
  auto values = std::make_shared<std::vector<int>>(data_of<int>(id, g.members[g.rank], 5, Values::small));
  MPI_Request request;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, values->data(), 5, MPI_INT, MPI_SUM, g.comm, &request), what);
  batch.add(request, [what, values, expected] { expect_values(what, expected, *values); });
  check_mpi(MPI_Ibarrier(g.comm, &request), what);
  batch.add(request, [] {});
}

int g_round = 0;

// Every call once, all outstanding together, completed by the next completion.
template <class T>
void round_of(const Group& g, const Datatype& type, long count, Layout layout) {
  Batch batch;
  post_host_requests(batch, g);
  post_iallreduce<T>(batch, g, type, count, layout);
  post_ireduce<T>(batch, g, type, count, layout);
  post_ibcast<T>(batch, g, type, count, layout);
  for (bool varying : {false, true}) {
    post_iallgather<T>(batch, g, type, count, layout, varying);
    post_igather<T>(batch, g, type, count, layout, varying);
    post_iscatter<T>(batch, g, type, count, layout, varying);
  }
  post_ialltoall<T>(batch, g, type, count, layout);
  post_ialltoallv<T>(batch, g, type, count, layout);
  post_ireduce_scatter_block<T>(batch, g, type, count, layout);
  post_iscan<T>(batch, g, type, count, layout, false);
  post_iscan<T>(batch, g, type, count, layout, true);
  const Completion how = completion(g_round++);
  batch.finish(how, Case{"round", type.name, "", count, layout_name(layout),
                         "comm=" + g.name + " completion=" + completion_name(how)});
}

template <class T>
void test_group(const Group& g, const Datatype& type) {
  for (long count : kCounts)
    for (Layout layout : kLayouts) round_of<T>(g, type, count, layout);
}

// ---- Intercommunicator ------------------------------------------------------

// MPICH (4.0.2 and 5.0.2) refuses a null buffer where MPI says none is read
// (a reduction's send buffer at the root, MPI_PROC_NULL's ranks), host
// buffers too: it gets one there, which nothing may touch.
bool null_buffers_refused() {
  static const bool refused = mpi_library_is("MPICH");
  return refused;
}

// Rank 0 of the even world ranks roots an Ibcast and an Ireduce to and from
// the odd ranks; every rank also takes part in an Iallreduce and an
// Iallgather, whose results come from the remote group.
template <class T>
void test_intercomm(const Group& g, const Datatype& type, long count, Layout layout) {
  if (layout == Layout::in_place) return;  // not allowed on intercommunicators
  const bool in_root_group = g.members[0] % 2 == 0;
  Batch batch;
  const std::string detail = "comm=" + g.name;
  {
    const uint64_t id = next_case_id();
    const Case what{"MPI_Ibcast", type.name, "", count, layout_name(layout), detail};
    const int root = in_root_group ? (g.rank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    const std::vector<T> data = data_of<T>(id, 0, count);
    auto ops = std::make_shared<Operands>();
    if (root != MPI_PROC_NULL || null_buffers_refused()) {
      ops->recv.emplace(make_buffer(root == MPI_ROOT ? data : poisoned<T>(count),
                                    root == MPI_ROOT ? send_memory(layout, g.rank) : recv_memory(layout, g.rank),
                                    offset_bytes(layout, sizeof(T), id)));
    }
    MPI_Request request;
    check_mpi(MPI_Ibcast(ops->recv_arg(), int(count), type.handle, root, g.comm, &request), what);
    track(batch, what, request, ops, root == MPI_PROC_NULL ? std::vector<T>{} : data, std::vector<T>{});
  }
  {
    const uint64_t id = next_case_id();
    const Case what{"MPI_Ireduce", type.name, "MPI_SUM", count, layout_name(layout), detail};
    const int root = in_root_group ? (g.rank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    std::vector<T> expected(count, T(0));
    const std::vector<int>& senders = in_root_group ? g.remote : g.members;
    for (int m : senders) {
      const std::vector<T> v = data_of<T>(id, m, count, Values::small);
      for (long i = 0; i < count; ++i) expected[i] += v[i];
    }
    const std::vector<T> mine = data_of<T>(id, g.members[g.rank], count, Values::small);
    const std::vector<T> initial = poisoned<T>(count);
    const bool sends = !in_root_group || (root == MPI_ROOT && null_buffers_refused());
    auto ops = placed(layout, id, g.rank, false, sends ? &mine : nullptr, root == MPI_ROOT ? &initial : nullptr);
    MPI_Request request;
    check_mpi(MPI_Ireduce(ops->send_arg(), ops->recv_arg(), int(count), type.handle, MPI_SUM, root, g.comm,
                          &request),
              what);
    track(batch, what, request, ops, root == MPI_ROOT ? expected : std::vector<T>{}, mine);
  }
  {
    const uint64_t id = next_case_id();
    const Case what{"MPI_Iallreduce", type.name, "MPI_SUM", count, layout_name(layout), detail};
    std::vector<T> expected(count, T(0));
    for (int m : g.remote) {
      const std::vector<T> v = data_of<T>(id, m, count, Values::small);
      for (long i = 0; i < count; ++i) expected[i] += v[i];
    }
    const std::vector<T> mine = data_of<T>(id, g.members[g.rank], count, Values::small);
    const std::vector<T> initial = poisoned<T>(count);
    auto ops = placed(layout, id, g.rank, false, &mine, &initial);
    MPI_Request request;
    check_mpi(MPI_Iallreduce(ops->send_arg(), ops->recv_arg(), int(count), type.handle, MPI_SUM, g.comm,
                             &request),
              what);
    track(batch, what, request, ops, expected, mine);
  }
  {
    const uint64_t id = next_case_id();
    const Case what{"MPI_Iallgather", type.name, "", count, layout_name(layout), detail};
    std::vector<T> expected;
    for (int m : g.remote) {
      const std::vector<T> v = data_of<T>(id, m, count);
      expected.insert(expected.end(), v.begin(), v.end());
    }
    const std::vector<T> mine = data_of<T>(id, g.members[g.rank], count);
    const std::vector<T> initial = poisoned<T>(count * long(g.remote.size()));
    auto ops = placed(layout, id, g.rank, false, &mine, &initial);
    MPI_Request request;
    check_mpi(MPI_Iallgather(ops->send_arg(), int(count), type.handle, ops->recv_arg(), int(count),
                             type.handle, g.comm, &request),
              what);
    track(batch, what, request, ops, expected, mine);
  }
  const Completion how = completion(g_round++);
  batch.finish(how, Case{"intercommunicator round", type.name, "", count, layout_name(layout),
                         detail + " completion=" + completion_name(how)});
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  const int world = world_rank();
  const Datatype int32{MPI_INT, "MPI_INT"};
  const Datatype float64{MPI_DOUBLE, "MPI_DOUBLE"};

  std::vector<int> everyone(world_size());
  std::iota(everyone.begin(), everyone.end(), 0);
  const Group all{MPI_COMM_WORLD, "MPI_COMM_WORLD", everyone, world};
  test_group<int32_t>(all, int32);
  test_group<double>(all, float64);

  // Even and odd world ranks apart, each half in descending world rank order.
  MPI_Comm half;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, world % 2, -world, &half), Case{"MPI_Comm_split", "", "", 0});
  Group split{half, world % 2 ? "odd ranks, reversed" : "even ranks, reversed", {}};
  std::vector<int> other_half;
  for (int member = world_size() - 1; member >= 0; --member) {
    (member % 2 == world % 2 ? split.members : other_half).push_back(member);
  }
  MPI_Comm_rank(half, &split.rank);
  test_group<double>(split, float64);

  if (world_size() >= 2) {
    MPI_Comm inter;
    // Local leader: the half's rank 0 (its highest world rank); remote
    // leader: the other half's highest world rank.
    check_mpi(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, other_half[0], 77, &inter),
              Case{"MPI_Intercomm_create", "", "", 0});
    Group intercomm{inter, "intercommunicator even/odd", split.members, split.rank, other_half};
    for (long count : kCounts)
      for (Layout layout : kLayouts) test_intercomm<int32_t>(intercomm, int32, count, layout);
    MPI_Comm_free(&inter);
  }
  MPI_Comm_free(&half);
  return suite::finish();
}
