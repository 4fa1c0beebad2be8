// Reductions on device buffers: MPI_Allreduce, MPI_Reduce, MPI_Reduce_scatter,
// MPI_Reduce_scatter_block, MPI_Scan and MPI_Exscan over every predefined
// type x op pair the standard allows, every buffer layout, and a user-defined
// op. Each result is checked against a reduction computed locally.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "suite.h"

namespace {

using namespace suite;

enum class Reduction { sum, prod, min, max, band, bor, bxor, land, lor, lxor, max_abs };

struct Op {
  Reduction reduction;
  MPI_Op handle;
  const char* name;
  Values values;  // inputs that keep the reference exact under this op
};

const Op kSum{Reduction::sum, MPI_SUM, "MPI_SUM", Values::small};
const Op kProd{Reduction::prod, MPI_PROD, "MPI_PROD", Values::factor};
const Op kMin{Reduction::min, MPI_MIN, "MPI_MIN", Values::wide};
const Op kMax{Reduction::max, MPI_MAX, "MPI_MAX", Values::wide};
const Op kBand{Reduction::band, MPI_BAND, "MPI_BAND", Values::bits};
const Op kBor{Reduction::bor, MPI_BOR, "MPI_BOR", Values::bits};
const Op kBxor{Reduction::bxor, MPI_BXOR, "MPI_BXOR", Values::bits};
const Op kLand{Reduction::land, MPI_LAND, "MPI_LAND", Values::truth};
const Op kLor{Reduction::lor, MPI_LOR, "MPI_LOR", Values::truth};
const Op kLxor{Reduction::lxor, MPI_LXOR, "MPI_LXOR", Values::truth};

// The predefined ops the standard allows per type class.
const std::vector<Op> kArithmeticOps = {kSum, kProd, kMin, kMax};
const std::vector<Op> kComplexOps = {kSum, kProd};
const std::vector<Op> kIntegerOps = {kSum, kProd, kMin,  kMax, kBand,
                                     kBor, kBxor, kLand, kLor, kLxor};

const std::vector<long> kCounts = {0, 1, 7, 1023};
const std::vector<Layout> kLayouts = {Layout::device, Layout::offset, Layout::in_place,
                                      Layout::mixed_ranks, Layout::mixed_sides};

// Ties go to the larger value so that the operand order never matters, as a
// commutative op requires.
double larger_magnitude(double a, double b) {
  if (std::fabs(a) != std::fabs(b)) return std::fabs(a) > std::fabs(b) ? a : b;
  return std::max(a, b);
}

void max_abs_doubles(void* in, void* inout, int* count, MPI_Datatype*) {
  const double* incoming = static_cast<const double*>(in);
  double* accumulated = static_cast<double*>(inout);
  for (int i = 0; i < *count; ++i) accumulated[i] = larger_magnitude(incoming[i], accumulated[i]);
}

template <class T>
T combine(Reduction reduction, T a, T b) {
  if constexpr (is_complex<T>::value) {
    return reduction == Reduction::prod ? a * b : a + b;
  } else {
    switch (reduction) {
      case Reduction::sum:
        return T(a + b);
      case Reduction::prod:
        return T(a * b);
      case Reduction::min:
        return std::min(a, b);
      case Reduction::max:
        return std::max(a, b);
      case Reduction::max_abs:
        if constexpr (std::is_same_v<T, double>) return larger_magnitude(a, b);
        break;
      default:
        break;
    }
    if constexpr (std::is_integral_v<T>) {
      switch (reduction) {
        case Reduction::band:
          return T(a & b);
        case Reduction::bor:
          return T(a | b);
        case Reduction::bxor:
          return T(a ^ b);
        case Reduction::land:
          return T(a && b);
        case Reduction::lor:
          return T(a || b);
        case Reduction::lxor:
          return T(!a != !b);
        default:
          break;
      }
    }
    return a;
  }
}

template <class T>
using RankInputs = std::vector<std::vector<T>>;

template <class T>
RankInputs<T> rank_inputs(size_t count, uint64_t case_id, Values kind) {
  RankInputs<T> inputs;
  for (int rank = 0; rank < world_size(); ++rank) {
    inputs.push_back(random_values<T>(count, case_id, rank, kind));
  }
  return inputs;
}

// Elementwise reduction of the inputs of ranks [0, ranks), in rank order.
template <class T>
std::vector<T> reduce_ranks(const Op& op, const RankInputs<T>& inputs, int ranks) {
  if (ranks == 0) return {};
  std::vector<T> result = inputs[0];
  for (int rank = 1; rank < ranks; ++rank) {
    for (size_t i = 0; i < result.size(); ++i) {
      result[i] = combine(op.reduction, result[i], inputs[rank][i]);
    }
  }
  return result;
}

template <class T>
std::vector<T> slice(const std::vector<T>& values, size_t first, size_t count) {
  return std::vector<T>(values.begin() + first, values.begin() + first + count);
}

// This rank's buffers for a reduction: the input as send buffer and a
// poisoned receive buffer of `recv_count` (none when absent), or with
// MPI_IN_PLACE the input in the receive buffer.
template <class T>
Operands place_reduction(Layout layout, uint64_t case_id, bool in_place,
                         const std::vector<T>& input, std::optional<size_t> recv_count) {
  const std::vector<T> recv = in_place ? input : poisoned<T>(recv_count.value_or(0));
  return place(layout, case_id, world_rank(), in_place, &input,
               in_place || recv_count ? &recv : nullptr);
}

template <class T>
void test_allreduce(const Datatype& type, const Op& op, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{"MPI_Allreduce", type.name, op.name, count, layout_name(layout)};
  const RankInputs<T> inputs = rank_inputs<T>(count, id, op.values);
  const Operands operands =
      place_reduction(layout, id, layout == Layout::in_place, inputs[rank], count);
  check_mpi(MPI_Allreduce(operands.send_arg(), operands.recv_arg(), count, type.handle, op.handle,
                          MPI_COMM_WORLD),
            what);
  check_operands(what, operands, reduce_ranks(op, inputs, world_size()), &inputs[rank]);
}

template <class T>
void test_reduce(const Datatype& type, const Op& op, long count, Layout layout) {
  const uint64_t id = next_case_id();
  // MPICH 4.0.2 crashes in an in-place MPI_Reduce at 3 ranks and more.
  if (layout == Layout::in_place && mpich_4() && world_size() > 2) return;
  const int rank = world_rank();
  const int root = int(id % world_size());
  const Case what{"MPI_Reduce", type.name,           op.name,
                  count,        layout_name(layout), "root=" + std::to_string(root)};
  const RankInputs<T> inputs = rank_inputs<T>(count, id, op.values);
  const bool is_root = rank == root;
  // The receive buffer matters at the root only; elsewhere MPI gets NULL.
  const Operands operands =
      place_reduction(layout, id, is_root && layout == Layout::in_place, inputs[rank],
                      is_root ? std::optional<size_t>(count) : std::nullopt);
  check_mpi(MPI_Reduce(operands.send_arg(), operands.recv_arg(), count, type.handle, op.handle,
                       root, MPI_COMM_WORLD),
            what);
  check_operands(what, operands, reduce_ranks(op, inputs, world_size()), &inputs[rank]);
}

template <class T>
void test_reduce_scatter(const Datatype& type, const Op& op, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const std::vector<int> counts = uneven_counts(count, world_size());
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  const size_t first = std::accumulate(counts.begin(), counts.begin() + rank, size_t(0));
  const Case what{"MPI_Reduce_scatter", type.name, op.name, long(total), layout_name(layout)};
  const RankInputs<T> inputs = rank_inputs<T>(total, id, op.values);
  const Operands operands =
      place_reduction(layout, id, layout == Layout::in_place, inputs[rank], size_t(counts[rank]));
  check_mpi(MPI_Reduce_scatter(operands.send_arg(), operands.recv_arg(), counts.data(), type.handle,
                               op.handle, MPI_COMM_WORLD),
            what);
  check_operands(what, operands, slice(reduce_ranks(op, inputs, world_size()), first, counts[rank]),
                 &inputs[rank]);
}

template <class T>
void test_reduce_scatter_block(const Datatype& type, const Op& op, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const size_t total = size_t(count) * world_size();
  const Case what{"MPI_Reduce_scatter_block", type.name, op.name, count, layout_name(layout)};
  const RankInputs<T> inputs = rank_inputs<T>(total, id, op.values);
  const Operands operands =
      place_reduction(layout, id, layout == Layout::in_place, inputs[rank], size_t(count));
  check_mpi(MPI_Reduce_scatter_block(operands.send_arg(), operands.recv_arg(), count, type.handle,
                                     op.handle, MPI_COMM_WORLD),
            what);
  check_operands(what, operands,
                 slice(reduce_ranks(op, inputs, world_size()), size_t(count) * rank, count),
                 &inputs[rank]);
}

template <class T>
void test_scan(const Datatype& type, const Op& op, long count, Layout layout, bool exclusive) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{exclusive ? "MPI_Exscan" : "MPI_Scan", type.name, op.name, count,
                  layout_name(layout)};
  const RankInputs<T> inputs = rank_inputs<T>(count, id, op.values);
  const Operands operands =
      place_reduction(layout, id, layout == Layout::in_place, inputs[rank], count);
  const auto scan = exclusive ? MPI_Exscan : MPI_Scan;
  check_mpi(
      scan(operands.send_arg(), operands.recv_arg(), count, type.handle, op.handle, MPI_COMM_WORLD),
      what);
  // Exscan leaves rank 0's receive buffer undefined: only its guards are checked.
  const int ranks_reduced = exclusive ? rank : rank + 1;
  check_operands(what, operands, reduce_ranks(op, inputs, ranks_reduced), &inputs[rank]);
}

template <class T>
void test_all_calls(const Datatype& type, const Op& op, long count, Layout layout) {
  test_allreduce<T>(type, op, count, layout);
  test_reduce<T>(type, op, count, layout);
  test_reduce_scatter<T>(type, op, count, layout);
  test_reduce_scatter_block<T>(type, op, count, layout);
  test_scan<T>(type, op, count, layout, false);
  test_scan<T>(type, op, count, layout, true);
}

// MPICH 4.0.2 compares 8-bit unsigned types as signed in MPI_MIN and MPI_MAX.
bool mpi_orders(const Datatype& type, const Op& op) {
  const bool unsigned_8 = type.handle == MPI_UINT8_T || type.handle == MPI_UNSIGNED_CHAR;
  return !(mpich_4() && unsigned_8 && (op.handle == MPI_MIN || op.handle == MPI_MAX));
}

template <class T>
void test_type(const Datatype& type, const std::vector<Op>& ops) {
  for (const Op& op : ops) {
    if (!mpi_orders(type, op)) continue;
    for (long count : kCounts) {
      for (Layout layout : kLayouts) test_all_calls<T>(type, op, count, layout);
    }
  }
}

void test_user_op() {
  MPI_Op handle;
  MPI_Op_create(max_abs_doubles, /*commute=*/1, &handle);
  const Op max_abs{Reduction::max_abs, handle, "user max-abs", Values::wide};
  const Datatype type{MPI_DOUBLE, "MPI_DOUBLE"};
  for (long count : kCounts) {
    for (Layout layout : kLayouts) {
      test_allreduce<double>(type, max_abs, count, layout);
      test_reduce<double>(type, max_abs, count, layout);
    }
  }
  MPI_Op_free(&handle);
}

void test_large_counts() {
  // Above 64 KiB: launched kernels, or (FERRY_WORKER_MAX_BYTES above them)
  // the engine worker's blocks sharing the call.
  const long medium = 100003;
  test_allreduce<float>({MPI_FLOAT, "MPI_FLOAT"}, kSum, medium, Layout::offset);
  test_allreduce<double>({MPI_DOUBLE, "MPI_DOUBLE"}, kMax, medium, Layout::in_place);
  test_allreduce<int32_t>({MPI_INT, "MPI_INT"}, kBxor, medium, Layout::device);
  const long large = 1 << 20;
  test_allreduce<float>({MPI_FLOAT, "MPI_FLOAT"}, kSum, large, Layout::device);
  test_reduce<double>({MPI_DOUBLE, "MPI_DOUBLE"}, kMax, large, Layout::offset);
  test_reduce_scatter_block<int32_t>({MPI_INT, "MPI_INT"}, kBxor, large / 4, Layout::in_place);
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  test_type<float>({MPI_FLOAT, "MPI_FLOAT"}, kArithmeticOps);
  test_type<double>({MPI_DOUBLE, "MPI_DOUBLE"}, kArithmeticOps);
  test_type<int32_t>({MPI_INT, "MPI_INT"}, kIntegerOps);
  test_type<int64_t>({MPI_INT64_T, "MPI_INT64_T"}, kIntegerOps);
  test_type<long long>({MPI_LONG_LONG, "MPI_LONG_LONG"}, kArithmeticOps);
  test_type<uint8_t>({MPI_UINT8_T, "MPI_UINT8_T"}, kIntegerOps);
  test_type<unsigned char>({MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR"}, kArithmeticOps);
  test_type<std::complex<float>>({MPI_C_FLOAT_COMPLEX, "MPI_C_FLOAT_COMPLEX"}, kComplexOps);
  test_type<std::complex<double>>({MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX"}, kComplexOps);
  // Fortran's types, as Fortran programs pass them (the engine's where their
  // size is its type's).
  test_type<float>({MPI_REAL, "MPI_REAL"}, kArithmeticOps);
  test_type<double>({MPI_DOUBLE_PRECISION, "MPI_DOUBLE_PRECISION"}, kArithmeticOps);
  test_type<int32_t>({MPI_INTEGER, "MPI_INTEGER"}, kArithmeticOps);
  test_type<int64_t>({MPI_INTEGER8, "MPI_INTEGER8"}, kArithmeticOps);
  test_type<std::complex<double>>({MPI_DOUBLE_COMPLEX, "MPI_DOUBLE_COMPLEX"}, kComplexOps);
  test_user_op();
  test_large_counts();
  return suite::finish();
}
