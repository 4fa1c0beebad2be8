// What the generated Fortran bindings share: Open MPI's (every call; its
// Fortran layers call PMPI_ past the C wrappers) and MPICH's (its `use
// mpi_f08` calls without a buffer), mpi_flavour.h.
#include "mpi_shim/mpi_flavour.h"

#if defined(FERRY_FORTRAN_BINDINGS) || defined(FERRY_FORTRAN_F08_BINDINGS)

#include "mpi_shim/fortran_support.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <string>

#include "mpi_shim/comm_shape.h"

namespace ferry::shim::fortran {
namespace {

bool status_result(int result) { return result == MPI_SUCCESS || result == MPI_ERR_IN_STATUS; }

}  // namespace

void one_based(MPI_Fint* indices, int count) {
  for (int i = 0; i < count; ++i)
    if (indices[i] != MPI_UNDEFINED) ++indices[i];
}

std::string text(const char* chars, int length) {
  std::string value(chars, static_cast<std::size_t>(std::max(length, 0)));
  value.erase(value.find_last_not_of(' ') + 1);
  return value;
}

int type_count(MPI_Comm comm) {
  CommShape shape;
  return comm_shape(comm, &shape) ? shape.peers : 0;
}

int neighbor_type_count(MPI_Comm comm, bool send) {
  int indegree = 0, outdegree = 0;
  if (!neighbor_degrees(comm, &indegree, &outdegree)) return 0;
  return send ? outdegree : indegree;
}

Requests::Requests(MPI_Fint* fortran_requests, int count) : fortran_(fortran_requests) {
  requests_.resize(static_cast<std::size_t>(std::max(count, 0)));
  for (std::size_t i = 0; i < requests_.size(); ++i) requests_[i] = PMPI_Request_f2c(fortran_[i]);
}

void Requests::give_back(int result) {
  if (!status_result(result)) return;
  for (std::size_t i = 0; i < requests_.size(); ++i) fortran_[i] = PMPI_Request_c2f(requests_[i]);
}

Types::Types(const MPI_Fint* fortran_types, int count) {
  types_.resize(static_cast<std::size_t>(std::max(count, 0)));
  for (std::size_t i = 0; i < types_.size(); ++i) types_[i] = PMPI_Type_f2c(fortran_types[i]);
}

// The MPI's own binding of MPI_WIN_GET_ATTR (mpif.h's arguments), for
// attributes it alone knows; and the C keyval of a Fortran one (MPICH numbers
// its predefined window attributes one past C's in Fortran).
namespace {
#if defined(FERRY_FORTRAN_BINDINGS)
constexpr const char* kWinGetAttrBinding = "ompi_win_get_attr_f";
int c_keyval(int fortran) { return fortran; }
#else
constexpr const char* kWinGetAttrBinding = "pmpi_win_get_attr_";
int c_keyval(int fortran) {
  for (int key : {MPI_WIN_BASE, MPI_WIN_SIZE, MPI_WIN_DISP_UNIT, MPI_WIN_CREATE_FLAVOR, MPI_WIN_MODEL})
    if (fortran == key + 1) return key;
  return fortran;
}
#endif
}  // namespace

void Win_get_attr(MPI_Fint* win, MPI_Fint* keyval, MPI_Aint* attribute_val, MPI_Fint* flag, MPI_Fint* ierror) {
  const MPI_Win c_win = PMPI_Win_f2c(*win);
  const int key = c_keyval(*keyval);
  const bool predefined = key == MPI_WIN_BASE || key == MPI_WIN_SIZE || key == MPI_WIN_DISP_UNIT ||
                          key == MPI_WIN_CREATE_FLAVOR || key == MPI_WIN_MODEL;
  using Binding = void (*)(MPI_Fint*, MPI_Fint*, MPI_Aint*, MPI_Fint*, MPI_Fint*);
  static const auto own_binding = reinterpret_cast<Binding>(dlsym(RTLD_NEXT, kWinGetAttrBinding));
  if (!predefined && own_binding) {
    // A keyval of the program's: the MPI knows in which language it was set.
    MPI_Fint absent = MPI_SUCCESS;  // `use mpi_f08` may leave ierror out
    own_binding(win, keyval, attribute_val, flag, ierror ? ierror : &absent);
    return;
  }
  // The predefined attributes (those Ferry answers for device windows): C
  // gets a pointer to the value (the base itself for MPI_WIN_BASE), Fortran
  // the value.
  void* value = nullptr;
  int found = 0;
  const int result = MPI_Win_get_attr(c_win, key, &value, &found);
  if (result == MPI_SUCCESS) {
    *flag = logical(found);
    if (found && key == MPI_WIN_BASE) {
      *attribute_val = reinterpret_cast<MPI_Aint>(value);
    } else if (found && key == MPI_WIN_SIZE) {
      *attribute_val = *static_cast<const MPI_Aint*>(value);
    } else if (found && predefined) {
      *attribute_val = *static_cast<const int*>(value);
    } else if (found) {
      *attribute_val = reinterpret_cast<MPI_Aint>(value);
    }
  }
  set_error(ierror, result);
}

#if defined(FERRY_FORTRAN_F08_BINDINGS)
// MPICH's f08 status is its C status field for field (mpi.h says so); MPICH
// 4.0 declares MPI_Status_c2f08 but its library has no such function.
static_assert(sizeof(MPI_F08_status) == sizeof(MPI_Status) &&
                  offsetof(MPI_F08_status, MPI_SOURCE) == offsetof(MPI_Status, MPI_SOURCE) &&
                  offsetof(MPI_F08_status, MPI_TAG) == offsetof(MPI_Status, MPI_TAG) &&
                  offsetof(MPI_F08_status, MPI_ERROR) == offsetof(MPI_Status, MPI_ERROR),
              "MPICH's f08 status is not its C status");

void F08Status::give_back(int result) {
  if (f08_ && result == MPI_SUCCESS) std::memcpy(f08_, &status_, sizeof(status_));
}

F08Statuses::F08Statuses(MPI_F08_status* statuses, int count)
    : f08_(statuses == MPI_F08_STATUSES_IGNORE ? nullptr : statuses) {
  if (f08_) statuses_.resize(static_cast<std::size_t>(std::max(count, 0)));
}

void F08Statuses::give_back(int result, int filled) {
  if (!f08_ || !status_result(result)) return;
  const int limit = std::min(filled, static_cast<int>(statuses_.size()));
  if (limit > 0) std::memcpy(f08_, statuses_.data(), sizeof(MPI_Status) * static_cast<std::size_t>(limit));
}

void F08Buffer_detach(void** buffer_addr, MPI_Fint* size, MPI_Fint* ierror) {
  void* address = nullptr;
  int bytes = 0;
  const int result = MPI_Buffer_detach(&address, &bytes);
  if (result == MPI_SUCCESS) {
    *buffer_addr = address;
    *size = bytes;
  }
  set_error(ierror, result);
}
#endif  // FERRY_FORTRAN_F08_BINDINGS

#if defined(FERRY_FORTRAN_BINDINGS)
namespace {

// Open MPI's Fortran sentinels are common blocks; every Fortran layer (mpif.h,
// `use mpi`, `use mpi_f08`) passes the address of the one the loader bound.
constexpr const char* kBottomName = "mpi_fortran_bottom";
constexpr const char* kInPlaceName = "mpi_fortran_in_place";
constexpr const char* kStatusIgnoreName = "mpi_fortran_status_ignore";
constexpr const char* kStatusesIgnoreName = "mpi_fortran_statuses_ignore";

// The addresses a Fortran sentinel may have: one per name mangling a Fortran
// compiler may have used (lower case with zero, one or two underscores, upper
// case); the symbols are looked up where the loader binds them.
class Sentinel {
 public:
  Sentinel(const char* name, const void* also = nullptr) {
    std::string lower(name), upper(name);
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
    const std::string manglings[] = {lower, lower + "_", lower + "__", upper};
    for (std::size_t i = 0; i < addresses_.size() - 1; ++i)
      addresses_[i] = dlsym(RTLD_DEFAULT, manglings[i].c_str());
    addresses_.back() = also;
  }
  bool is(const void* address) const {
    return address && std::find(addresses_.begin(), addresses_.end(), address) != addresses_.end();
  }

 private:
  std::array<const void*, 5> addresses_{};
};

struct Sentinels {
  Sentinel bottom{kBottomName};
  Sentinel in_place{kInPlaceName};
  Sentinel status_ignore{kStatusIgnoreName, MPI_F_STATUS_IGNORE};
  Sentinel statuses_ignore{kStatusesIgnoreName, MPI_F_STATUSES_IGNORE};
};

const Sentinels& sentinels() {
  static const Sentinels kSentinels;
  return kSentinels;
}

}  // namespace

void* buffer(void* address) {
  const Sentinels& known = sentinels();
  if (known.bottom.is(address)) return MPI_BOTTOM;
  if (known.in_place.is(address)) return MPI_IN_PLACE;
  return address;
}

Status::Status(MPI_Fint* fortran_status)
    : fortran_(fortran_status), ignored_(!fortran_status || sentinels().status_ignore.is(fortran_status)) {}

void Status::give_back(int result) {
  if (!ignored_ && result == MPI_SUCCESS) PMPI_Status_c2f(&status_, fortran_);
}

Statuses::Statuses(MPI_Fint* fortran_statuses, int count)
    : fortran_(fortran_statuses),
      ignored_(!fortran_statuses || sentinels().statuses_ignore.is(fortran_statuses)) {
  if (!ignored_) statuses_.resize(static_cast<std::size_t>(std::max(count, 0)));
}

void Statuses::give_back(int result, int filled) {
  if (ignored_ || !status_result(result)) return;
  const int limit = std::min(filled, static_cast<int>(statuses_.size()));
  // A Fortran status is MPI_STATUS_SIZE INTEGERs, the size of a C status.
  const std::size_t stride = sizeof(MPI_Status) / sizeof(MPI_Fint);
  for (int i = 0; i < limit; ++i) PMPI_Status_c2f(&statuses_[i], fortran_ + stride * i);
}

void Buffer_detach(void* /*buffer*/, MPI_Fint* size, MPI_Fint* ierror) {
  void* address = nullptr;
  int bytes = 0;
  const int result = MPI_Buffer_detach(&address, &bytes);
  if (result == MPI_SUCCESS) *size = bytes;
  set_error(ierror, result);
}

#endif  // FERRY_FORTRAN_BINDINGS

}  // namespace ferry::shim::fortran

#endif
