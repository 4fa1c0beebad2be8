// Check and report library shared by the MPI suite programs.
//
// Every check compares what MPI produced against a reference the rank computes
// on its own: input data is random but seeded by (case, rank), so any rank can
// rebuild every peer's contribution without communicating.
#pragma once

#include <mpi.h>

#include <complex>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "device_alloc.h"

namespace suite {

// ---- Process lifetime and reporting -------------------------------------

// MPI_Init, MPI_ERRORS_RETURN on MPI_COMM_WORLD and MPI_COMM_SELF (so a
// failing call is reported with its context), and the device allocator.
void init(int* argc, char*** argv);
// Sums failures over MPI_COMM_WORLD, prints "No Errors" from rank 0 when there
// were none, finalizes MPI and returns the process exit code.
int finish();

int world_rank();
int world_size();
// Whether MPI_Get_library_version names `name` ("Open MPI", "MPICH"): an
// MPI's own faults are told apart at run time, since one build of a program
// may run on several (the MPI standard ABI).
bool mpi_library_is(const char* name);
// MPICH 4.0 (Debian's 4.0.2): its own faults, host buffers without Ferry
// alike, are passed over where a program names them.
bool mpich_4();
// A fresh id per case, identical on every rank because all ranks run the same
// sequence of cases. Seeds the case's data.
uint64_t next_case_id();

// What a check is about; printed with every failure.
struct Case {
  std::string call;
  std::string type;
  std::string op{};  // empty for calls without a reduction
  long count = 0;
  std::string layout{};
  std::string detail{};  // root, communicator, peer, ...
};

void fail(const Case& what, const std::string& problem);
void expect(bool ok, const Case& what, const std::string& problem);
// Ends the job when an MPI call failed: later collectives would no longer
// match across ranks, so carrying on could only hang.
void check_mpi(int rc, const Case& what);

// A datatype handle with the name failure reports print.
struct Datatype {
  MPI_Datatype handle;
  const char* name;
};

// A sender and a receiver. Every ordered pair of ranks takes its turn as the
// cases go by; the other ranks sit the case out, so even large blocking
// sends cannot deadlock. Needs at least two ranks.
struct Pair {
  int source;
  int dest;
};
Pair pair_for(uint64_t case_id);

// ---- Where buffers live --------------------------------------------------

enum class Memory { device, host };

// Where one case puts its buffers.
enum class Layout {
  device,       // every buffer in device memory
  offset,       // device memory at an unaligned offset from the allocation
  in_place,     // MPI_IN_PLACE, the data buffer in device memory
  mixed_ranks,  // odd ranks pass host buffers, even ranks device buffers
  mixed_sides,  // send and receive buffers of a rank differ in kind
};
const char* layout_name(Layout layout);
Memory send_memory(Layout layout, int rank);
Memory recv_memory(Layout layout, int rank);
// Bytes past the allocation base: for Layout::offset 1..7 bytes for byte
// elements, one element otherwise; zero for the other layouts.
size_t offset_bytes(Layout layout, size_t element_size, uint64_t case_id);

// Memory handed to MPI, `offset` bytes past its allocation base and followed
// by guard bytes, so that writes past either end are caught.
// Device memory is only ever touched through suite_memcpy.
class Buffer {
 public:
  Buffer(size_t bytes, Memory memory, size_t offset = 0);
  Buffer(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer();

  void* data() const { return base_ + offset_; }
  void write(const void* src, size_t bytes);
  void read(void* dst, size_t bytes) const;
  bool guards_intact() const;

 private:
  char* base_;
  size_t offset_;
  size_t bytes_;
  Memory memory_;
};

template <class T>
Buffer make_buffer(const std::vector<T>& contents, Memory memory, size_t offset = 0) {
  Buffer buffer(contents.size() * sizeof(T), memory, offset);
  buffer.write(contents.data(), contents.size() * sizeof(T));
  return buffer;
}

template <class T>
std::vector<T> read_back(const Buffer& buffer, size_t count) {
  std::vector<T> values(count);
  buffer.read(values.data(), count * sizeof(T));
  return values;
}

// This rank's buffers for one call.
struct Operands {
  bool in_place = false;
  std::optional<Buffer> send;
  std::optional<Buffer> recv;

  // NULL where the call takes no buffer at this rank.
  void* send_arg() const { return in_place ? MPI_IN_PLACE : send ? send->data() : nullptr; }
  void* recv_arg() const { return recv ? recv->data() : nullptr; }
};

// Places `send` and `recv` (the receive buffer's initial contents) as `layout`
// says; a null vector means no buffer at this rank. With `in_place` the send
// argument is MPI_IN_PLACE and `recv` must already hold the rank's data.
template <class T>
Operands place(Layout layout, uint64_t case_id, int rank, bool in_place, const std::vector<T>* send,
               const std::vector<T>* recv) {
  const size_t offset = offset_bytes(layout, sizeof(T), case_id);
  Operands operands;
  operands.in_place = in_place;
  if (send && !in_place)
    operands.send.emplace(make_buffer(*send, send_memory(layout, rank), offset));
  if (recv) {
    const Memory memory = in_place ? Memory::device : recv_memory(layout, rank);
    operands.recv.emplace(make_buffer(*recv, memory, offset));
  }
  return operands;
}

// ---- Data ----------------------------------------------------------------

template <class T>
struct is_complex : std::false_type {};
template <class T>
struct is_complex<std::complex<T>> : std::true_type {};

// Value ranges that keep every reference exact in floating point.
enum class Values {
  wide,    // nonzero integers in [-1000, 1000] (in [1, 255] for unsigned bytes)
  small,   // nonzero integers in [-9, 9]: sums of a few ranks stay exact
  factor,  // +-1, +-2, +-3 (+-1, +-2 per complex part): products stay exact
  bits,    // uniform over the whole integer range
  truth,   // 0, 1, 2, 7: logical ops must treat every nonzero as true
};

std::mt19937_64 seeded_rng(uint64_t case_id, int rank);

// One scalar of `kind`; complex parts use narrower factors so that a product
// over four ranks stays exact.
template <class Real>
Real random_scalar(std::mt19937_64& rng, Values kind, bool complex_part) {
  static const int kFactors[] = {-3, -2, -1, 1, 2, 3};
  static const int kComplexFactors[] = {-2, -1, 1, 2};
  static const int kTruths[] = {0, 1, 2, 7};
  const long sign = rng() % 2 ? 1 : -1;
  switch (kind) {
    case Values::wide:
      if constexpr (std::is_unsigned_v<Real>)
        return Real(1 + rng() % 255);
      else
        return Real(sign * long(1 + rng() % 1000));
    case Values::small:
      if constexpr (std::is_unsigned_v<Real>)
        return Real(1 + rng() % 9);
      else
        return Real(sign * long(1 + rng() % 9));
    case Values::factor:
      if constexpr (std::is_unsigned_v<Real>)
        return Real(1 + rng() % 3);
      else
        return Real(complex_part ? kComplexFactors[rng() % 4] : kFactors[rng() % 6]);
    case Values::bits:
      return Real(rng());
    case Values::truth:
      return Real(kTruths[rng() % 4]);
  }
  return Real(1);
}

template <class T>
T random_value(std::mt19937_64& rng, Values kind) {
  if constexpr (is_complex<T>::value) {
    using Real = typename T::value_type;
    Real re = random_scalar<Real>(rng, kind, true);
    return T(re, random_scalar<Real>(rng, kind, true));
  } else {
    return random_scalar<T>(rng, kind, false);
  }
}

// The data rank `rank` contributes to case `case_id`.
template <class T>
std::vector<T> random_values(size_t count, uint64_t case_id, int rank, Values kind = Values::wide) {
  std::mt19937_64 rng = seeded_rng(case_id, rank);
  std::vector<T> values(count);
  for (T& value : values) value = random_value<T>(rng, kind);
  return values;
}

// Per-rank block sizes around `count`: count + rank, except that rank 1 gets
// an empty block; all zero when count is zero.
std::vector<int> uneven_counts(long count, int ranks);

// What a receive buffer holds before the call: a value no case produces, so
// an element MPI left untouched shows up.
template <class T>
T poison() {
  if constexpr (is_complex<T>::value) {
    return T(-12345, -12345);
  } else if constexpr (std::is_unsigned_v<T>) {
    return T(0xA5);
  } else {
    return T(-12345);
  }
}

template <class T>
std::vector<T> poisoned(size_t count) {
  return std::vector<T>(count, poison<T>());
}

// ---- Checks --------------------------------------------------------------

template <class T>
std::string show(const T& value) {
  std::ostringstream text;
  if constexpr (is_complex<T>::value) {
    text << "(" << value.real() << "," << value.imag() << ")";
  } else if constexpr (sizeof(T) == 1) {
    text << int(value);
  } else {
    text << value;
  }
  return text.str();
}

template <class T>
void expect_values(const Case& what, const std::vector<T>& expected, const std::vector<T>& got) {
  size_t wrong = 0;
  size_t first = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == got[i]) continue;
    if (wrong++ == 0) first = i;
  }
  if (wrong == 0) return;
  std::ostringstream problem;
  problem << "index " << first << ": expected " << show(expected[first]) << " got "
          << show(got[first]) << " (" << wrong << " of " << expected.size() << " elements wrong)";
  fail(what, problem.str());
}

// Reads expected.size() elements from `got` and compares them; also checks
// that nothing was written past either end of the buffer.
template <class T>
void expect_buffer(const Case& what, const Buffer& got, const std::vector<T>& expected) {
  expect_values(what, expected, read_back<T>(got, expected.size()));
  expect(got.guards_intact(), what, "wrote outside the buffer");
}

// The receive buffer against `expected` (only its guards when `expected` is
// empty) and the send buffer against `sent`, which it must still hold.
template <class T>
void check_operands(const Case& what, const Operands& operands, const std::vector<T>& expected,
                    const std::vector<T>* sent) {
  if (operands.recv) expect_buffer(what, *operands.recv, expected);
  if (operands.send && sent) {
    Case send_case = what;
    send_case.detail += " (send buffer)";
    expect_buffer(send_case, *operands.send, *sent);
  }
}

// The element count a status reports in `type`, and where it came from.
void expect_status(const Case& what, const MPI_Status& status, MPI_Datatype type, int count,
                   int source, int tag);

}  // namespace suite
