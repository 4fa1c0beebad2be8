// What the blocking and nonblocking point-to-point programs share: the
// layouts and counts they run, the send modes, how a receive names its
// message, the spare room a receive posts past the message, and cancels.
#pragma once

#include <mpi.h>

#include <vector>

#include "mpi40_calls.h"
#include "suite.h"

namespace suite {

const std::vector<long> kP2pCounts = {0, 1, 7, 1023};
// A count large enough that a message leaves the MPI's eager path.
constexpr long kLarge = 1 << 18;
// MPI_IN_PLACE does not apply to point-to-point calls.
const std::vector<Layout> kP2pLayouts = {Layout::device, Layout::offset, Layout::mixed_ranks,
                                         Layout::mixed_sides};

// Receives post room for this many elements more than arrive.
constexpr long kSlack = 3;
// Case tags stay below this; ready-mode sends' ready signals use the range
// above it. Both fit the 32767 every MPI must allow.
constexpr int kTagSpan = 16000;

enum class Mode { standard, synchronous, buffered, ready };
// How the receive names what it wants.
enum class Match { exact, any_source, any_tag, any_source_and_tag };

inline const char* match_name(Match match) {
  switch (match) {
    case Match::exact:
      return "exact";
    case Match::any_source:
      return "MPI_ANY_SOURCE";
    case Match::any_tag:
      return "MPI_ANY_TAG";
    case Match::any_source_and_tag:
      return "MPI_ANY_SOURCE+MPI_ANY_TAG";
  }
  return "?";
}

// The tag of receives that are cancelled: no case sends it before the
// cancel has had its chance.
constexpr int kCancelTag = 32500;
// How long a cancelled receive may take to complete before the case decides
// the MPI could not cancel it.
constexpr double kCancelPatienceSeconds = 2;

// Polls the cancelled request with MPI_Request_get_status, which leaves it
// alone for the completion call that finishes it; true when it completed
// within kCancelPatienceSeconds.
inline bool cancel_completes(MPI_Request request, const Case& what) {
  const double start = MPI_Wtime();
  int done = 0;
  while (!done && MPI_Wtime() - start < kCancelPatienceSeconds)
    check_mpi(MPI_Request_get_status(request, &done, MPI_STATUS_IGNORE), what);
  return done;
}

// A cancelled receive leaves its buffer as it was (still poisoned); one the
// MPI could not cancel completed only with the message sent afterwards.
template <class T>
void expect_cancel_outcome(const Case& what, const MPI_Status& status, bool completed_unsent, const Buffer& recv,
                           const std::vector<T>& sent) {
  int cancelled = 0;
  check_mpi(MPI_Test_cancelled(&status, &cancelled), what);
  if (cancelled) {
    expect_buffer(what, recv, poisoned<T>(sent.size()));
  } else {
    expect(!completed_unsent, what, "completed before any message was sent, yet not cancelled");
    expect_buffer(what, recv, sent);
  }
}

// values followed by `slack` poisoned elements: what a receive buffer with
// room to spare must hold after the message.
template <class T>
std::vector<T> with_slack(std::vector<T> values, long slack = kSlack) {
  values.resize(values.size() + slack, poison<T>());
  return values;
}

}  // namespace suite
