// One-sided communication with derived datatypes on device windows: vector,
// indexed (blocks out of address order), struct of one basic type, resized
// and negative-lower-bound types on the origin, the target and the result,
// each side split differently from the other; accumulates with a strided
// target under contention; gets into a strided origin; types freed and
// their handles reused between cases; MPI_ERR_TYPE and MPI_ERR_RMA_RANGE.
//
// Every type is built twice: as an MPI datatype and as the list of byte
// offsets of its elements in type-map order, from which the reference is
// computed on the host.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "rma_common.h"
#include "suite.h"

namespace {

using namespace suite;

// A datatype of T elements and its type map.
template <class T>
struct Type {
  std::string name;
  MPI_Datatype handle = MPI_DATATYPE_NULL;
  std::vector<long> offsets;  // bytes, of each T in one element, in type-map order
  long extent = 0;            // bytes

  // Byte offsets of every T of `count` elements, in type-map order.
  std::vector<long> map(int count) const {
    std::vector<long> all;
    for (int i = 0; i < count; ++i)
      for (long o : offsets) all.push_back(i * extent + o);
    return all;
  }
  // Elements of T in `count` elements.
  size_t elements(int count) const { return offsets.size() * size_t(count); }
  // The bytes `count` elements touch, [lo, hi) from the buffer pointer.
  long lo(int count) const {
    const std::vector<long> m = map(count);
    return *std::min_element(m.begin(), m.end());
  }
  long hi(int count) const {
    const std::vector<long> m = map(count);
    return *std::max_element(m.begin(), m.end()) + long(sizeof(T));
  }
  void free() { MPI_Type_free(&handle); }
};

template <class T>
Type<T> committed(Type<T> type) {
  MPI_Type_commit(&type.handle);
  return type;
}

template <class T>
Type<T> contiguous(int n) {
  Type<T> t{"contiguous(" + std::to_string(n) + ")"};
  MPI_Type_contiguous(n, mpi_type<T>(), &t.handle);
  for (int i = 0; i < n; ++i) t.offsets.push_back(long(i * sizeof(T)));
  t.extent = long(n * sizeof(T));
  return committed(t);
}

template <class T>
Type<T> vector(int count, int blocklength, int stride) {
  Type<T> t{"vector(" + std::to_string(count) + "," + std::to_string(blocklength) + "," + std::to_string(stride) +
            ")"};
  MPI_Type_vector(count, blocklength, stride, mpi_type<T>(), &t.handle);
  for (int b = 0; b < count; ++b)
    for (int i = 0; i < blocklength; ++i) t.offsets.push_back(long((b * stride + i) * sizeof(T)));
  t.extent = long(((count - 1) * stride + blocklength) * sizeof(T));
  return committed(t);
}

// Blocks in the order given, which need not be address order.
template <class T>
Type<T> indexed(std::vector<int> lengths, std::vector<int> displacements) {
  Type<T> t{"indexed"};
  MPI_Type_indexed(int(lengths.size()), lengths.data(), displacements.data(), mpi_type<T>(), &t.handle);
  long lo = 1L << 40, hi = -(1L << 40);
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int i = 0; i < lengths[b]; ++i) {
      const long o = long((displacements[b] + i) * sizeof(T));
      t.offsets.push_back(o);
      lo = std::min(lo, o);
      hi = std::max(hi, o + long(sizeof(T)));
    }
  t.extent = hi - std::min(lo, 0L);
  return committed(t);
}

// A struct whose fields are all T, at byte displacements (some negative),
// resized to [lb, lb + extent).
template <class T>
Type<T> struct_resized(std::vector<int> lengths, std::vector<long> displacements, long lb, long extent) {
  Type<T> t{"struct+resized(lb " + std::to_string(lb) + ", extent " + std::to_string(extent) + ")"};
  std::vector<MPI_Aint> displs(displacements.begin(), displacements.end());
  std::vector<MPI_Datatype> types(lengths.size(), mpi_type<T>());
  MPI_Datatype inner;
  MPI_Type_create_struct(int(lengths.size()), lengths.data(), displs.data(), types.data(), &inner);
  MPI_Type_create_resized(inner, lb, extent, &t.handle);
  MPI_Type_free(&inner);
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int i = 0; i < lengths[b]; ++i) t.offsets.push_back(displacements[b] + long(i * sizeof(T)));
  t.extent = extent;
  return committed(t);
}

// A device buffer for `count` elements of type, reachable at ptr() with the
// type's lower bound (possibly negative) in range.
template <class T>
class TypedBuffer {
 public:
  TypedBuffer(const Type<T>& type, int count, const std::vector<T>& contents, Memory memory)
      : lo_(type.lo(count)), elements_(size_t(type.hi(count) - lo_) / sizeof(T)),
        buffer_(make_buffer(contents.empty() ? std::vector<T>(elements_) : contents, memory, 1)) {}
  void* ptr() const { return static_cast<char*>(buffer_.data()) - lo_; }
  size_t elements() const { return elements_; }
  // Index into the contents of the T at byte offset o from ptr().
  size_t index(long o) const { return size_t(o - lo_) / sizeof(T); }
  std::vector<T> read() const { return read_back<T>(buffer_, elements_); }
  bool guards_intact() const { return buffer_.guards_intact(); }

 private:
  long lo_;
  size_t elements_;
  Buffer buffer_;
};

Memory origin_memory(uint64_t case_id, int rank) { return (case_id + rank) % 2 ? Memory::host : Memory::device; }

// MPI_Put of `origin_count` origin elements into `target_count` target
// elements of the right neighbour's window in a fence epoch; the holes of
// the target keep their values.
template <class T>
void put_typed(Flavor flavor, const Type<T>& origin, int origin_count, const Type<T>& target, int target_count,
               const char* type_name) {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " MPI_Put " + origin.name + " -> " + target.name, type_name, "",
            long(origin.elements(origin_count))};
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  // Where the target elements start, in T: past any negative lower bound, at an odd place.
  const long at = 3 + std::max(0L, -target.lo(target_count)) / long(sizeof(T));
  const size_t count = size_t(at + target.hi(target_count) / long(sizeof(T)) + 2);
  auto initial = [&](int r) { return random_values<T>(count, id, r); };
  auto origin_data = [&](int r) {
    TypedBuffer<T> shape(origin, origin_count, {}, Memory::host);
    return random_values<T>(shape.elements(), id, 100 + r);
  };
  DeviceWindow<T> window(flavor, count, initial(rank), MPI_COMM_WORLD, what);
  TypedBuffer<T> source(origin, origin_count, origin_data(rank), origin_memory(id, rank));
  check_mpi(MPI_Win_fence(0, window.win()), what);
  check_mpi(MPI_Put(source.ptr(), origin_count, origin.handle, right, window.disp(size_t(at)), target_count,
                    target.handle, window.win()),
            what);
  check_mpi(MPI_Win_fence(MPI_MODE_NOSUCCEED, window.win()), what);

  // Left's origin data in its type-map order lands in this window's target map.
  std::vector<T> expected = initial(rank);
  const std::vector<T> sent = origin_data(left);
  const std::vector<long> from = origin.map(origin_count), to = target.map(target_count);
  for (size_t k = 0; k < to.size(); ++k) expected[size_t(at) + size_t(to[k]) / sizeof(T)] = sent[source.index(from[k])];
  expect_values(what, expected, window.read());
  Case origin_case = what;
  origin_case.detail = "origin buffer";
  expect_values(origin_case, origin_data(rank), source.read());
  expect(source.guards_intact(), origin_case, "wrote outside the origin buffer");
  MPI_Barrier(MPI_COMM_WORLD);
}

// MPI_Get from the left neighbour's window into a typed origin buffer under
// a shared lock; the origin's holes keep their values.
template <class T>
void get_typed(Flavor flavor, const Type<T>& origin, int origin_count, const Type<T>& target, int target_count,
               const char* type_name) {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " MPI_Get " + target.name + " -> " + origin.name, type_name, "",
            long(origin.elements(origin_count))};
  const int left = (rank + ranks - 1) % ranks;
  const long at = 1 + std::max(0L, -target.lo(target_count)) / long(sizeof(T));
  const size_t count = size_t(at + target.hi(target_count) / long(sizeof(T)) + 1);
  auto initial = [&](int r) { return random_values<T>(count, id, r); };
  DeviceWindow<T> window(flavor, count, initial(rank), MPI_COMM_WORLD, what);
  TypedBuffer<T> shape(origin, origin_count, {}, Memory::host);
  const std::vector<T> before = random_values<T>(shape.elements(), id, 100 + rank);
  TypedBuffer<T> dest(origin, origin_count, before, origin_memory(id, rank + 1));
  check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, left, 0, window.win()), what);
  check_mpi(MPI_Get(dest.ptr(), origin_count, origin.handle, left, window.disp(size_t(at)), target_count,
                    target.handle, window.win()),
            what);
  check_mpi(MPI_Win_unlock(left, window.win()), what);

  std::vector<T> expected = before;
  const std::vector<T> there = initial(left);
  const std::vector<long> into = origin.map(origin_count), from = target.map(target_count);
  for (size_t k = 0; k < from.size(); ++k) expected[dest.index(into[k])] = there[size_t(at) + size_t(from[k]) / sizeof(T)];
  expect_values(what, expected, dest.read());
  expect(dest.guards_intact(), what, "wrote outside the origin buffer");
  MPI_Barrier(MPI_COMM_WORLD);
}

// Every rank accumulates (SUM) into every rank's window through a strided
// target type, under lock_all, for several rounds: the sums must be exact
// and the holes untouched.
template <class T>
void accumulate_strided(Flavor flavor, const Type<T>& target, int target_count, const char* type_name) {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " MPI_Accumulate into " + target.name + " under MPI_Win_lock_all",
            type_name, "MPI_SUM", long(target.elements(target_count))};
  const int rounds = 5;
  const size_t n = target.elements(target_count);
  const long at = 2;
  const size_t count = size_t(at + target.hi(target_count) / long(sizeof(T)) + 3);
  const std::vector<T> initial = random_values<T>(count, id, rank, Values::small);
  auto contribution = [&](int r, int round) { return random_values<T>(n, id + 1 + round, r, Values::small); };
  DeviceWindow<T> window(flavor, count, initial, MPI_COMM_WORLD, what);
  check_mpi(MPI_Win_lock_all(0, window.win()), what);
  for (int round = 0; round < rounds; ++round) {
    Buffer origin = make_buffer(contribution(rank, round), origin_memory(id + round, rank));
    for (int t = 0; t < ranks; ++t)
      check_mpi(MPI_Accumulate(origin.data(), int(n), mpi_type<T>(), (rank + t) % ranks, window.disp(size_t(at)),
                               target_count, target.handle, MPI_SUM, window.win()),
                what);
    check_mpi(MPI_Win_flush_all(window.win()), what);
  }
  check_mpi(MPI_Win_unlock_all(window.win()), what);
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<T> expected = initial;
  const std::vector<long> to = target.map(target_count);
  for (int round = 0; round < rounds; ++round)
    for (int r = 0; r < ranks; ++r) {
      const std::vector<T> c = contribution(r, round);
      for (size_t k = 0; k < n; ++k) expected[size_t(at) + size_t(to[k]) / sizeof(T)] += c[k];
    }
  expect_values(what, expected, window.read());
  MPI_Barrier(MPI_COMM_WORLD);
}

// MPI_Get_accumulate (SUM) with a strided origin, an indexed result and a
// struct target, under an exclusive lock on the right neighbour.
template <class T>
void get_accumulate_typed(Flavor flavor, const Type<T>& origin, int origin_count, const Type<T>& result,
                          int result_count, const Type<T>& target, int target_count, const char* type_name) {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " MPI_Get_accumulate " + origin.name + " + " + target.name + " -> " +
                result.name,
            type_name, "MPI_SUM", long(target.elements(target_count))};
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  const long at = 1 + std::max(0L, -target.lo(target_count)) / long(sizeof(T));
  const size_t count = size_t(at + target.hi(target_count) / long(sizeof(T)) + 1);
  auto initial = [&](int r) { return random_values<T>(count, id, r, Values::small); };
  TypedBuffer<T> origin_shape(origin, origin_count, {}, Memory::host);
  TypedBuffer<T> result_shape(result, result_count, {}, Memory::host);
  auto origin_data = [&](int r) { return random_values<T>(origin_shape.elements(), id, 100 + r, Values::small); };
  const std::vector<T> result_before = random_values<T>(result_shape.elements(), id, 200 + rank);
  DeviceWindow<T> window(flavor, count, initial(rank), MPI_COMM_WORLD, what);
  TypedBuffer<T> source(origin, origin_count, origin_data(rank), origin_memory(id, rank));
  TypedBuffer<T> fetched(result, result_count, result_before, origin_memory(id, rank + 1));
  check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, window.win()), what);
  check_mpi(MPI_Get_accumulate(source.ptr(), origin_count, origin.handle, fetched.ptr(), result_count, result.handle,
                               right, window.disp(size_t(at)), target_count, target.handle, MPI_SUM, window.win()),
            what);
  check_mpi(MPI_Win_unlock(right, window.win()), what);
  MPI_Barrier(MPI_COMM_WORLD);

  const std::vector<long> t = target.map(target_count), o = origin.map(origin_count), r = result.map(result_count);
  // The result holds right's elements from before, in type-map order.
  std::vector<T> expected_result = result_before;
  const std::vector<T> right_initial = initial(right);
  for (size_t k = 0; k < t.size(); ++k)
    expected_result[fetched.index(r[k])] = right_initial[size_t(at) + size_t(t[k]) / sizeof(T)];
  Case result_case = what;
  result_case.detail = "result buffer";
  expect_values(result_case, expected_result, fetched.read());
  expect(fetched.guards_intact(), result_case, "wrote outside the result buffer");
  // This window got left's origin data added.
  std::vector<T> expected = initial(rank);
  const std::vector<T> added = origin_data(left);
  for (size_t k = 0; k < t.size(); ++k) expected[size_t(at) + size_t(t[k]) / sizeof(T)] += added[source.index(o[k])];
  expect_values(what, expected, window.read());
  MPI_Barrier(MPI_COMM_WORLD);
}

// A basic type mismatch between origin and target gets the error class the
// real MPI gives the same call on a host window; a target type that reaches
// past the window is MPI_ERR_RMA_RANGE (Ferry's check: the real MPI's vary
// by one-sided component); the window stays usable.
void bad_typed_calls() {
  if (host_baseline()) return;
  Case what{"bad typed RMA calls on a device window", "MPI_INT"};
  const size_t count = 40;
  DeviceWindow<int> window(Flavor::allocate, count, poisoned<int>(count), MPI_COMM_WORLD, what);
  Type<int> strided = vector<int>(4, 2, 5);  // 8 ints over 17
  Buffer origin = make_buffer(std::vector<float>(8, 1.0f), Memory::device);
  auto expect_class = [&](int rc, int wanted, const char* problem) {
    int got = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &got);
    Case c = what;
    c.detail = problem;
    expect(got == wanted, c, "error class " + std::to_string(got) + ", expected " + std::to_string(wanted));
  };
  // The real MPI's answer, on host memory.
  int real_class = MPI_SUCCESS;
  {
    std::vector<int> memory(count);
    std::vector<float> floats(8, 1.0f);
    MPI_Win host;
    check_mpi(MPI_Win_create(memory.data(), MPI_Aint(count * sizeof(int)), sizeof(int), MPI_INFO_NULL,
                             MPI_COMM_WORLD, &host),
              what);
    MPI_Win_set_errhandler(host, MPI_ERRORS_RETURN);
    check_mpi(MPI_Win_lock_all(0, host), what);
    const int rc = MPI_Accumulate(floats.data(), 8, MPI_FLOAT, 0, 0, 1, strided.handle, MPI_SUM, host);
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &real_class);
    check_mpi(MPI_Win_unlock_all(host), what);
    MPI_Win_free(&host);
  }
  expect(real_class != MPI_SUCCESS, what, "the real MPI accepted a float origin for an int target");
  check_mpi(MPI_Win_lock_all(0, window.win()), what);
  expect_class(MPI_Accumulate(origin.data(), 8, MPI_FLOAT, 0, 0, 1, strided.handle, MPI_SUM, window.win()),
               real_class, "float origin, int target");
  expect_class(MPI_Put(origin.data(), 16, MPI_INT, 0, window.disp(30), 2, strided.handle, window.win()),
               MPI_ERR_RMA_RANGE, "strided target past the window's end");
  check_mpi(MPI_Put(origin.data(), 8, MPI_INT, 0, window.disp(23), 1, strided.handle, window.win()), what);
  check_mpi(MPI_Win_unlock_all(window.win()), what);
  strided.free();
  MPI_Barrier(MPI_COMM_WORLD);
}

template <class T>
void typed_cases(Flavor flavor, const char* type_name) {
  // Each case builds its types and frees them after, so later cases reuse
  // the handles of earlier, different types.
  {
    Type<T> o = vector<T>(3, 2, 3), t = indexed<T>({1, 4, 2, 3}, {12, 0, 5, 20});
    put_typed<T>(flavor, o, 5, t, 3, type_name);  // 30 elements, split 2+2+2 against 1+4+2+3
    o.free();
    t.free();
  }
  {
    const long s = long(sizeof(T));
    Type<T> o = contiguous<T>(1), t = struct_resized<T>({2, 4, 5}, {0, 5 * s, 13 * s}, 0, 19 * s);
    put_typed<T>(flavor, o, 33, t, 3, type_name);
    o.free();
    t.free();
  }
  {
    // Negative displacements and lower bound on the origin; odd strides at the target.
    const long s = long(sizeof(T));
    Type<T> o = struct_resized<T>({2, 3}, {-3 * s, 1 * s}, -4 * s, 9 * s), t = vector<T>(5, 1, 2);
    put_typed<T>(flavor, o, 7, t, 7, type_name);
    get_typed<T>(flavor, o, 7, t, 7, type_name);
    o.free();
    t.free();
  }
  {
    // A strided origin for a get, and a target whose lower bound is negative.
    const long s = long(sizeof(T));
    Type<T> o = vector<T>(5, 3, 7), t = struct_resized<T>({4, 1}, {-6 * s, 2 * s}, -6 * s, 10 * s);
    get_typed<T>(flavor, o, 3, t, 9, type_name);
    o.free();
    t.free();
  }
  {
    Type<T> t = vector<T>(7, 2, 5);
    accumulate_strided<T>(flavor, t, 3, type_name);
    t.free();
  }
  {
    const long s = long(sizeof(T));
    Type<T> o = vector<T>(4, 3, 4), r = indexed<T>({5, 1, 6}, {9, 0, 2}),
            t = struct_resized<T>({3, 3}, {4 * s, 0}, 0, 8 * s);
    get_accumulate_typed<T>(flavor, o, 1, r, 1, t, 2, type_name);
    o.free();
    r.free();
    t.free();
  }
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  for (Flavor flavor : {Flavor::allocate, Flavor::create}) {
    typed_cases<int>(flavor, "MPI_INT");
    typed_cases<double>(flavor, "MPI_DOUBLE");
  }
  if (shared_windows()) typed_cases<int64_t>(Flavor::allocate_shared, "MPI_INT64_T");
  bad_typed_calls();
  return finish();
}
