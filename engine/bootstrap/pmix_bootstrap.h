// Bootstrap over PMIx, for ranks started by a PMIx-enabled launcher (Open
// MPI's mpirun, Slurm's srun --mpi=pmix, PRRTE) with or without MPI in the
// process. Built only when the PMIx client library is found at configure
// time (FERRY_HAVE_PMIX).
//
// The bootstrap spans the caller's PMIx namespace: rank is the PMIx rank,
// size is PMIX_JOB_SIZE. allgather posts the caller's bytes under a key new
// to each call ("ferry.ag.<sequence>", PMIX_GLOBAL scope), commits, fences
// with data collection and reads every rank's value; barrier is a fence
// without data. Every rank must make the same sequence of calls. Fences are
// bounded by FERRY_BOOTSTRAP_TIMEOUT where the PMIx server honours
// PMIX_TIMEOUT. Posted values stay in the PMIx store until finalization, so
// this suits set-up traffic, not bulk data.
//
// PMIx_Init is reference counted: when the process is already a PMIx client
// (MPI initialized it), make_pmix_bootstrap joins that initialization and the
// destructor only drops its own reference; it never tears down a client that
// someone else started.
#pragma once

#include <memory>
#include <string>

#include "engine/bootstrap/bootstrap.h"

namespace ferry {

// Not collective: each process can make its bootstrap independently. On
// failure *out is left empty and, when failure is set, it receives the reason
// (also logged at WARN).
Status make_pmix_bootstrap(std::unique_ptr<Bootstrap>* out, std::string* failure = nullptr);

}  // namespace ferry
