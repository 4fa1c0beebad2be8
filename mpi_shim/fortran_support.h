// What the generated Fortran bindings (gen_fortran.py) need: the Fortran
// sentinels of the MPI in use, and statuses, handle arrays, LOGICALs and
// CHARACTER arguments converted between the two languages.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "mpi_shim/mpi_flavour.h"

namespace ferry::shim::fortran {

// Fortran INTEGER arguments are passed straight where C takes an int.
static_assert(sizeof(MPI_Fint) == sizeof(int), "Fortran INTEGER is not C's int in this MPI");

#if defined(FERRY_FORTRAN_BINDINGS)
// A buffer argument as C takes it: the addresses of Fortran's MPI_BOTTOM and
// MPI_IN_PLACE become C's; any other address is the buffer itself.
void* buffer(void* address);
#endif

inline void set_error(MPI_Fint* ierror, int result) {
  if (ierror) *ierror = result;
}

// C truth to a Fortran LOGICAL (.TRUE. is 1 for gfortran; compilers whose
// .TRUE. is -1 test its low bit).
inline MPI_Fint logical(int value) { return value ? 1 : 0; }

// Zero-based C indices to Fortran's one-based ones; MPI_UNDEFINED stays.
void one_based(MPI_Fint* indices, int count);

// A Fortran CHARACTER argument (not terminated; trailing blanks are padding).
std::string text(const char* chars, int length);

// The length of an alltoallw type array (the group the buffers are indexed
// by), and of a neighbourhood alltoallw's (out-degree for the send types,
// in-degree for the receive types); 0 where the communicator is not valid.
int type_count(MPI_Comm comm);
int neighbor_type_count(MPI_Comm comm, bool send);

#if defined(FERRY_FORTRAN_BINDINGS)
// One status argument: the C status the call fills, copied to the Fortran
// one after a successful call unless it is MPI_STATUS_IGNORE.
class Status {
 public:
  explicit Status(MPI_Fint* fortran_status);
  MPI_Status* c() { return ignored_ ? MPI_STATUS_IGNORE : &status_; }
  void give_back(int result);

 private:
  MPI_Fint* fortran_;
  bool ignored_;
  MPI_Status status_{};
};

// An array of statuses (or MPI_STATUSES_IGNORE); `filled` of them are
// copied back after the call (also when it reports MPI_ERR_IN_STATUS).
class Statuses {
 public:
  Statuses(MPI_Fint* fortran_statuses, int count);
  MPI_Status* c() { return ignored_ ? MPI_STATUSES_IGNORE : statuses_.data(); }
  void give_back(int result, int filled);

 private:
  MPI_Fint* fortran_;
  bool ignored_;
  std::vector<MPI_Status> statuses_;
};

#endif  // FERRY_FORTRAN_BINDINGS

#if defined(FERRY_FORTRAN_F08_BINDINGS)
// A `TYPE(MPI_Status)` argument of MPICH's `use mpi_f08` (the C status's
// layout), or its MPI_STATUS_IGNORE: as Status.
class F08Status {
 public:
  explicit F08Status(MPI_F08_status* status) : f08_(status == MPI_F08_STATUS_IGNORE ? nullptr : status) {}
  MPI_Status* c() { return f08_ ? &status_ : MPI_STATUS_IGNORE; }
  void give_back(int result);

 private:
  MPI_F08_status* f08_;
  MPI_Status status_{};
};

// An array of them, or MPI_STATUSES_IGNORE: as Statuses.
class F08Statuses {
 public:
  F08Statuses(MPI_F08_status* statuses, int count);
  MPI_Status* c() { return f08_ ? statuses_.data() : MPI_STATUSES_IGNORE; }
  void give_back(int result, int filled);

 private:
  MPI_F08_status* f08_;
  std::vector<MPI_Status> statuses_;
};
#endif  // FERRY_FORTRAN_F08_BINDINGS

// An array of requests the call reads and updates.
class Requests {
 public:
  Requests(MPI_Fint* fortran_requests, int count);
  MPI_Request* c() { return requests_.data(); }
  void give_back(int result);

 private:
  MPI_Fint* fortran_;
  std::vector<MPI_Request> requests_;
};

// An array of datatypes the call reads.
class Types {
 public:
  Types(const MPI_Fint* fortran_types, int count);
  const MPI_Datatype* c() const { return types_.data(); }

 private:
  std::vector<MPI_Datatype> types_;
};

// The bindings written by hand (gen_fortran.py's HAND_WRITTEN, F08_HAND_WRITTEN).
void Win_get_attr(MPI_Fint* win, MPI_Fint* keyval, MPI_Aint* attribute_val, MPI_Fint* flag, MPI_Fint* ierror);
#if defined(FERRY_FORTRAN_BINDINGS)
void Buffer_detach(void* buffer, MPI_Fint* size, MPI_Fint* ierror);
#else
void F08Buffer_detach(void** buffer_addr, MPI_Fint* size, MPI_Fint* ierror);
#endif

}  // namespace ferry::shim::fortran
