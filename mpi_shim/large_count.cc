#include "mpi_shim/large_count.h"

#include "engine/common/log.h"
#include "engine/gpu/gpu.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

int neighbours(MPI_Comm comm, ArraySide side) {
  int topology = MPI_UNDEFINED;
  if (PMPI_Topo_test(comm, &topology) != MPI_SUCCESS) return 0;
  if (topology == MPI_CART) {
    int dims = 0;
    PMPI_Cartdim_get(comm, &dims);
    return 2 * dims;
  }
  if (topology == MPI_GRAPH) {
    int rank = 0, count = 0;
    PMPI_Comm_rank(comm, &rank);
    PMPI_Graph_neighbors_count(comm, rank, &count);
    return count;
  }
  if (topology == MPI_DIST_GRAPH) {
    int in = 0, out = 0, weighted = 0;
    PMPI_Dist_graph_neighbors_count(comm, &in, &out, &weighted);
    return side == ArraySide::kSend ? out : in;
  }
  return 0;
}

}  // namespace

int large_array_length(ArrayGroup group, MPI_Comm comm, ArraySide side, bool has_root, int root) {
  if (group == ArrayGroup::kNeighbours) return neighbours(comm, side);
  int inter = 0, size = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter && group == ArrayGroup::kGroup) {
    PMPI_Comm_remote_size(comm, &size);
  } else {
    PMPI_Comm_size(comm, &size);
  }
  // A rooted call's arrays (gatherv's receive side, scatterv's send side)
  // are read at the root alone.
  if (has_root) {
    int rank = 0;
    PMPI_Comm_rank(comm, &rank);
    const bool at_root = inter ? root == MPI_ROOT : rank == root;
    if (!at_root) return 0;
  }
  return size;
}

bool names_device_memory(std::initializer_list<const void*> buffers) {
  for (const void* buffer : buffers)
    if (buffer && gpu::classify(buffer).kind == gpu::MemoryKind::kDevice) return true;
  return false;
}

int count_beyond_int() {
  static const int code = error_code_saying(
      MPI_ERR_COUNT,
      "ferry: a large-count call (_c) with a count or displacement past 2147483647 on device memory; Ferry moves "
      "device buffers of large-count calls only where every value fits an int");
  FERRY_INFO(Init, "a large-count call with a value past an int on device memory: MPI_ERR_COUNT");
  return code;
}

}  // namespace ferry::shim
