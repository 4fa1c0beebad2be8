// File descriptors from the other processes of one machine: the handles of
// exported device memory (CUDA VMM's POSIX descriptors, the emulated
// device's memfds). CUDA's descriptors are not regular files, so opening
// /proc/<pid>/fd/<n> does not work for them; two ways that do:
//  - pidfd: pidfd_open + pidfd_getfd (Linux 5.6) duplicate a descriptor of
//    another process directly. Needs ptrace access to it: same user, and
//    Yama's ptrace_scope 0 (or CAP_SYS_PTRACE).
//  - socket: each process sends its descriptors (SCM_RIGHTS) over a Unix
//    socket in the abstract namespace, named after a nonce agreed over the
//    bootstrap, the process id and the rank, so jobs never collide.
// kAuto tries pidfd and falls back to the socket for the whole call when any
// rank could not use it; a process that once failed pidfd goes straight to
// the socket afterwards.
#pragma once

#include <cstddef>

#include "engine/bootstrap/bootstrap.h"

namespace ferry {

enum class FdPassing : int { kAuto = 0, kPidfd, kSocket };
const char* fd_passing_name(FdPassing method);

// Collective over the bootstrap's ranks, all on one machine. Rank r offers
// mine[0..count) (count is the same on every rank); on return
// all[q * count + i] is a new descriptor in this process for rank q's
// mine[i], its own ranks' included, which the caller closes. The offered
// descriptors stay the caller's and need to stay open until the call
// returns. The result is agreed: every rank gets kOk, or every rank gets
// an error and no descriptors. used, when set, receives the way it went.
Status allgather_fds(Bootstrap& bootstrap, const int* mine, std::size_t count, int* all,
                     FdPassing method = FdPassing::kAuto, FdPassing* used = nullptr);

}  // namespace ferry
