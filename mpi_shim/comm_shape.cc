#include "mpi_shim/comm_shape.h"

namespace ferry::shim {

bool comm_shape(MPI_Comm comm, CommShape* shape) {
  if (comm == MPI_COMM_NULL) return false;
  int inter = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS) return false;
  shape->inter = inter != 0;
  if (PMPI_Comm_rank(comm, &shape->rank) != MPI_SUCCESS || PMPI_Comm_size(comm, &shape->size) != MPI_SUCCESS)
    return false;
  shape->peers = shape->size;
  return !shape->inter || PMPI_Comm_remote_size(comm, &shape->peers) == MPI_SUCCESS;
}

bool neighbor_degrees(MPI_Comm comm, int* indegree, int* outdegree) {
  int topology = MPI_UNDEFINED;
  if (comm == MPI_COMM_NULL || PMPI_Topo_test(comm, &topology) != MPI_SUCCESS) return false;
  if (topology == MPI_CART) {
    int dims = 0;
    if (PMPI_Cartdim_get(comm, &dims) != MPI_SUCCESS) return false;
    *indegree = *outdegree = 2 * dims;
    return true;
  }
  if (topology == MPI_GRAPH) {
    int rank = 0;
    if (PMPI_Comm_rank(comm, &rank) != MPI_SUCCESS || PMPI_Graph_neighbors_count(comm, rank, indegree) != MPI_SUCCESS)
      return false;
    *outdegree = *indegree;
    return true;
  }
  int weighted = 0;
  return topology == MPI_DIST_GRAPH &&
         PMPI_Dist_graph_neighbors_count(comm, indegree, outdegree, &weighted) == MPI_SUCCESS;
}

bool root_role(const CommShape& shape, int root, RootRole* role) {
  if (shape.inter) {
    if (root == MPI_ROOT) {
      *role = RootRole::kRoot;
    } else if (root == MPI_PROC_NULL) {
      *role = RootRole::kNone;
    } else if (root >= 0 && root < shape.peers) {
      *role = RootRole::kLeaf;
    } else {
      return false;
    }
    return true;
  }
  if (root < 0 || root >= shape.size) return false;
  *role = root == shape.rank ? RootRole::kRoot : RootRole::kLeaf;
  return true;
}

}  // namespace ferry::shim
