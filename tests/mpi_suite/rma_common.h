// What the one-sided programs share: device windows of every flavor, read
// and written only through suite_memcpy, and MPI types for element types.
#pragma once

#include <mpi.h>

#include <cstdlib>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "suite.h"

namespace suite {

// How a case gets its window.
enum class Flavor { allocate, allocate_shared, create };

inline const char* flavor_name(Flavor flavor) {
  switch (flavor) {
    case Flavor::allocate: return "MPI_Win_allocate";
    case Flavor::allocate_shared: return "MPI_Win_allocate_shared";
    case Flavor::create: return "MPI_Win_create";
  }
  return "?";
}

// A window of `count` elements of T per rank, in device memory, holding
// `initial` after construction.
template <class T>
class DeviceWindow {
 public:
  DeviceWindow(Flavor flavor, size_t count, const std::vector<T>& initial, MPI_Comm comm, const Case& what)
      : flavor_(flavor), count_(count) {
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
    const MPI_Aint bytes = MPI_Aint(count * sizeof(T));
    switch (flavor) {
      case Flavor::allocate:
        check_mpi(MPI_Win_allocate(bytes, sizeof(T), info, comm, &base_, &win_), what);
        disp_unit_ = sizeof(T);
        break;
      case Flavor::allocate_shared:
        check_mpi(MPI_Win_allocate_shared(bytes, sizeof(T), info, comm, &base_, &win_), what);
        disp_unit_ = sizeof(T);
        break;
      case Flavor::create:
        // Three bytes past the allocation: no alignment is assumed; the
        // displacement unit is one byte.
        owned_ = static_cast<char*>(suite_device_malloc(bytes + 3));
        base_ = owned_ + 3;
        check_mpi(MPI_Win_create(base_, bytes, 1, info, comm, &win_), what);
        disp_unit_ = 1;
        break;
    }
    MPI_Info_free(&info);
    MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
    write(initial);
    // Everyone's initial contents are in place before anyone reaches them.
    MPI_Barrier(comm);
  }
  ~DeviceWindow() {
    MPI_Win_free(&win_);
    if (owned_) suite_device_free(owned_);
  }

  MPI_Win win() const { return win_; }
  void* base() const { return base_; }
  int disp_unit() const { return disp_unit_; }
  // The displacement of element i at any rank.
  MPI_Aint disp(size_t i) const { return MPI_Aint(i * sizeof(T) / size_t(disp_unit_)); }
  std::vector<T> read() const {
    std::vector<T> values(count_);
    if (count_) suite_memcpy(values.data(), base_, count_ * sizeof(T));
    return values;
  }
  void write(const std::vector<T>& values) {
    if (count_) suite_memcpy(base_, values.data(), count_ * sizeof(T));
  }

 private:
  Flavor flavor_;
  size_t count_;
  void* base_ = nullptr;
  char* owned_ = nullptr;
  MPI_Win win_ = MPI_WIN_NULL;
  int disp_unit_ = 1;
};

inline constexpr Flavor kFlavors[] = {Flavor::allocate, Flavor::allocate_shared, Flavor::create};

// Whether this run makes shared-memory windows: not where
// FERRY_SUITE_NO_SHARED_WINDOWS is set (ranks on several machines, where
// MPI_Win_allocate_shared cannot be made).
inline bool shared_windows() {
  const char* off = std::getenv("FERRY_SUITE_NO_SHARED_WINDOWS");
  return !off || !*off;
}

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, int>) return MPI_INT;
  if constexpr (std::is_same_v<T, long>) return MPI_LONG;
  if constexpr (std::is_same_v<T, int64_t>) return MPI_INT64_T;
  if constexpr (std::is_same_v<T, uint32_t>) return MPI_UINT32_T;
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
}

// Whether this run is plain MPI with host buffers (the baseline), where
// Ferry's own behaviour (staging, device-only rules) is not in play.
inline bool host_baseline() { return std::string(suite_device_backend()) == "host"; }

}  // namespace suite
