#include "engine/common/launcher.h"

#include <cstdlib>
#include <initializer_list>

namespace ferry {

int local_rank() {
  static const int rank = [] {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
      if (const char* value = std::getenv(name)) return std::atoi(value);
    }
    return -1;
  }();
  return rank;
}

}  // namespace ferry
