// What the blocking and nonblocking point-to-point programs share: the
// layouts and counts they run, the send modes, how a receive names its
// message, and the spare room a receive posts past the message.
#pragma once

#include <vector>

#include "suite.h"

namespace suite {

const std::vector<long> kP2pCounts = {0, 1, 7, 1023};
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

// values followed by `slack` poisoned elements: what a receive buffer with
// room to spare must hold after the message.
template <class T>
std::vector<T> with_slack(std::vector<T> values, long slack = kSlack) {
  values.resize(values.size() + slack, poison<T>());
  return values;
}

}  // namespace suite
