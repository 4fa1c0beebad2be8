// What the job launcher tells a process about its placement.
#pragma once

namespace ferry {

// Rank among the processes of this node, from the launcher's environment
// (Open MPI, PMIx, MPICH/Hydra, Slurm); -1 when no launcher says.
int local_rank();

}  // namespace ferry
