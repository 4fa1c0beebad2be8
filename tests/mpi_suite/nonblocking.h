// What the two halves of the nonblocking point-to-point program share
// (nonblocking.cc: one message at a time, derived datatypes;
// nonblocking_matching.cc: wildcards, many requests at once, cancel, free,
// MPI_PROC_NULL).
#pragma once

#include <string>

#include "completion.h"
#include "suite.h"

namespace suite {

inline Case send_side(Case what) {
  what.detail += " (send buffer)";
  return what;
}

inline std::string completions_detail(Completion recv, Completion send) {
  return " recv_completion=" + completion_name(recv) + " send_completion=" + completion_name(send);
}

// The cases of nonblocking_matching.cc, every rank taking part.
void test_matching_and_lifetimes();

}  // namespace suite
