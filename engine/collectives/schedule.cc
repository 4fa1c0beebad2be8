#include "engine/collectives/schedule.h"

#include <algorithm>

namespace ferry {

AllreduceAlgorithm choose_allreduce(int nranks, bool any_in_place) {
  return nranks <= 2 && !any_in_place ? AllreduceAlgorithm::kOneShot : AllreduceAlgorithm::kTwoShot;
}

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

}  // namespace ferry
