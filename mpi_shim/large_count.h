// MPI 4.0's large-count calls (MPI_Send_c and its kin), where the MPI has
// them (FERRY_MPI_LARGE_COUNT): their wrappers, generated from
// mpi_functions.txt's "large" lines, narrow counts and displacements to int
// and go through the handler of the call without _c. A call whose values do
// not fit an int goes to the real MPI where that is safe, and fails with
// MPI_ERR_COUNT where it names device memory.
#pragma once

#include <mpi.h>

#include <climits>
#include <initializer_list>
#include <vector>


namespace ferry::shim {

inline bool fits_int(MPI_Count value) { return value >= INT_MIN && value <= INT_MAX; }

// Which of a call's two sides an array describes (sendcounts, sdispls: send).
enum class ArraySide { kSend, kRecv };
// Whose ranks an array's entries stand for: the group the call addresses
// (the remote group of an intercommunicator), the local group (MPI_Reduce_
// scatter's counts, as collective_staging.h reads them), or a
// neighbourhood (its in- or out-degree).
enum class ArrayGroup { kGroup, kLocalGroup, kNeighbours };

// How many entries such an array of a call on comm has for this rank; 0
// where MPI says the array is not significant (the gather's counts off the
// root). has_root: the call takes a root.
int large_array_length(ArrayGroup group, MPI_Comm comm, ArraySide side, bool has_root, int root);

// values[0..length) as ints into out; false if one does not fit. A null
// array stays null (out empty).
template <typename Wide>
bool narrow(const Wide* values, int length, std::vector<int>* out) {
  if (!values) return true;
  out->resize(static_cast<std::size_t>(length));
  for (int i = 0; i < length; ++i) {
    if (!fits_int(values[i])) return false;
    (*out)[static_cast<std::size_t>(i)] = static_cast<int>(values[i]);
  }
  return true;
}

// The narrowed array to pass on: null where the caller's was null.
inline const int* narrowed(const void* original, const std::vector<int>& values) {
  static const int kNone = 0;
  if (!original) return nullptr;
  return values.empty() ? &kNone : values.data();
}

// Whether any of buffers is device memory.
bool names_device_memory(std::initializer_list<const void*> buffers);

// An error code of class MPI_ERR_COUNT whose string says that counts past
// an int do not reach device memory through Ferry (error_code_saying); each
// call is logged under FERRY_DEBUG=INFO.
int count_beyond_int();

}  // namespace ferry::shim
