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

// Direct reduce-scatter + all-gather over mapped peer memory: rank r reduces
// its slice from every rank's input and writes the result into every rank's
// output. Slices tile [0, count), are disjoint, and start on multiples of
// align elements (so vector loads stay aligned) except where count runs out.
ElementRange direct_slice(int rank, int nranks, std::size_t count, std::size_t align);

// The pipeline chunks of a slice: chunk c covers [begin + c * chunk, ...).
std::size_t pipeline_chunk_elements(std::size_t slice_elements, std::size_t element_bytes,
                                    std::size_t max_chunk_bytes);

}  // namespace ferry
