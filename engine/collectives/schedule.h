// Schedules: which rank moves which part of the data, as pure functions of
// (rank, nranks, count). Executors (kernels, host code) carry them out; unit
// tests check them by simulating every rank in one process.
#pragma once

#include <cstddef>

namespace ferry {

struct ElementRange {
  std::size_t begin;
  std::size_t end;
  std::size_t size() const { return end - begin; }
};

enum class AllreduceAlgorithm {
  // Every rank reads every rank's whole input and reduces into its own output.
  kOneShot,
  // Rank r reduces slice r (direct_slice) and stores it into every output.
  kTwoShot,
};

// One-shot moves (n-1) * bytes into each rank, two-shot 2 (n-1)/n * bytes:
// equal at two ranks, where one-shot wins by using loads only (remote stores
// compete with the peer's loads on the link). In place, a rank's output is
// its peers' input, so only two-shot (disjoint slices) is safe.
AllreduceAlgorithm choose_allreduce(int nranks, bool any_in_place);

// Direct reduce-scatter + all-gather over mapped peer memory: rank r reduces
// its slice from every rank's input and writes the result into every rank's
// output. Slices tile [0, count), are disjoint, and start on multiples of
// align elements (so vector loads stay aligned) except where count runs out.
ElementRange direct_slice(int rank, int nranks, std::size_t count, std::size_t align);

}  // namespace ferry
