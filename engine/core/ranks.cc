#include "engine/core/ranks.h"

#include <unistd.h>

#include "engine/core/locality.h"
#include "engine/gpu/gpu.h"

namespace ferry {

RankIdentity this_rank_identity() {
  gpu::Backend* backend = gpu::active_backend();
  RankIdentity mine{machine_identity(), static_cast<std::int32_t>(getpid()), gpu::backend_id(backend),
                    backend ? backend->device_count() : 0, 0, 0, 0, backend && backend->physical_devices()};
  int device = -1;
  if (backend && backend->device_count() > 0 && backend->chosen_device(&device)) {
    mine.has_device = 1;
    mine.device_key = backend->device_key(device);
    mine.takes_turns = backend->processes_take_turns(device);
  }
  return mine;
}

bool ranks_on_one_machine(const std::vector<RankIdentity>& ranks) {
  for (const RankIdentity& r : ranks)
    if (!same_machine(r, ranks[0])) return false;
  return true;
}

bool ranks_take_turns_on_a_gpu(const std::vector<RankIdentity>& ranks) {
  for (std::size_t a = 0; a < ranks.size(); ++a)
    for (std::size_t b = a + 1; b < ranks.size(); ++b)
      if (ranks[a].has_device && ranks[b].has_device && ranks[a].host_hash == ranks[b].host_hash &&
          ranks[a].pid != ranks[b].pid && ranks[a].backend == ranks[b].backend &&
          ranks[a].device_key == ranks[b].device_key && (ranks[a].takes_turns || ranks[b].takes_turns))
        return true;
  return false;
}

bool ranks_share_one_gpu(const std::vector<RankIdentity>& ranks) {
  for (const RankIdentity& r : ranks)
    if (!r.has_device || r.host_hash != ranks[0].host_hash || r.backend != ranks[0].backend ||
        r.device_key != ranks[0].device_key)
      return false;
  return !ranks.empty();
}

std::vector<int> gpu_leaders(const std::vector<RankIdentity>& ranks) {
  const int n = static_cast<int>(ranks.size());
  std::vector<int> leader(n);
  bool shared = false;
  for (int r = 0; r < n; ++r) {
    leader[r] = r;
    for (int s = 0; s < r && leader[r] == r; ++s)
      if (ranks[s].has_device && ranks[r].has_device && ranks[s].host_hash == ranks[r].host_hash &&
          ranks[s].backend == ranks[r].backend && ranks[s].device_key == ranks[r].device_key)
        leader[r] = s;
    shared = shared || leader[r] != r;
  }
  if (!shared) leader.clear();
  return leader;
}

}  // namespace ferry
