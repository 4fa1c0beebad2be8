// Communicator constructors: each member notes the new communicator's
// identity for sends through peer memory (peer_pt2pt.h), computed from its
// parent's without any communication of its own.
#include "handlers.h"
#include "mpi_shim/peer_pt2pt.h"

namespace ferry::shim {
namespace {

// Tells apart the identities of communicators made by different kinds of
// call at the same count on one parent (they never are: the count differs).
constexpr std::uint64_t kSplitTypeSalt = 1ULL << 32;

}  // namespace

int handle_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
  const int result = PMPI_Comm_dup(comm, newcomm);
  if (result == MPI_SUCCESS) peer::derived(comm, *newcomm, 0);
  return result;
}

int handle_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* newcomm) {
  const int result = PMPI_Comm_dup_with_info(comm, info, newcomm);
  if (result == MPI_SUCCESS) peer::derived(comm, *newcomm, 0);
  return result;
}

int handle_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  const int result = PMPI_Comm_split(comm, color, key, newcomm);
  // Ranks of one color make one communicator: the color tells them apart.
  if (result == MPI_SUCCESS) peer::derived(comm, *newcomm, static_cast<std::uint32_t>(color));
  return result;
}

int handle_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm* newcomm) {
  const int result = PMPI_Comm_split_type(comm, split_type, key, info, newcomm);
  // The communicators of different machines share an identity, but have no
  // member in common, so no envelope can reach the wrong one.
  if (result == MPI_SUCCESS) peer::derived(comm, *newcomm, kSplitTypeSalt + static_cast<std::uint32_t>(split_type));
  return result;
}

int handle_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* newcomm) {
  const int result = PMPI_Comm_create(comm, group, newcomm);
  if (result == MPI_SUCCESS) peer::derived(comm, *newcomm, 0);
  return result;
}

int handle_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm* newcomm) {
  const int result = PMPI_Comm_create_group(comm, group, tag, newcomm);
  if (result == MPI_SUCCESS) peer::derived_from_group(comm, *newcomm, tag);
  return result;
}

int handle_Cart_create(MPI_Comm comm_old, int ndims, const int dims[], const int periods[], int reorder,
                       MPI_Comm* comm_cart) {
  const int result = PMPI_Cart_create(comm_old, ndims, dims, periods, reorder, comm_cart);
  if (result == MPI_SUCCESS) peer::derived(comm_old, *comm_cart, 0);
  return result;
}

int handle_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm* newcomm) {
  const int result = PMPI_Cart_sub(comm, remain_dims, newcomm);
  if (result == MPI_SUCCESS) peer::derived(comm, *newcomm, 0);
  return result;
}

int handle_Comm_free(MPI_Comm* comm) {
  // The handle may name a new communicator later.
  if (comm) peer::forget(*comm);
  return PMPI_Comm_free(comm);
}

}  // namespace ferry::shim
