#include "engine/collectives/schedule.h"

#include <algorithm>

namespace ferry {

ElementRange direct_slice(int rank, int nranks, std::size_t count, std::size_t align) {
  const std::size_t units = (count + align - 1) / align;
  const std::size_t per_rank = units / nranks;
  const std::size_t extra = units % nranks;
  // The first `extra` ranks take one more unit.
  const std::size_t first_unit = rank * per_rank + std::min<std::size_t>(rank, extra);
  const std::size_t my_units = per_rank + (static_cast<std::size_t>(rank) < extra ? 1 : 0);
  const std::size_t begin = std::min(count, first_unit * align);
  const std::size_t end = std::min(count, (first_unit + my_units) * align);
  return {begin, end};
}

std::size_t pipeline_chunk_elements(std::size_t slice_elements, std::size_t element_bytes,
                                    std::size_t max_chunk_bytes) {
  // At least four chunks keep the pull, reduce and push stages overlapped;
  // chunks of 1 MiB or more keep the per-chunk launch cost small; multiples
  // of 16 bytes keep the reduce kernel's vector loads aligned.
  constexpr std::size_t kMinChunkBytes = 1 << 20;
  std::size_t bytes = std::max(kMinChunkBytes, slice_elements * element_bytes / 4);
  bytes = std::min(bytes, max_chunk_bytes);
  std::size_t elements = std::max<std::size_t>(1, bytes / element_bytes);
  const std::size_t align = std::max<std::size_t>(1, 16 / element_bytes);
  elements = std::max(align, elements / align * align);
  return elements;
}

}  // namespace ferry
