// Which algorithm runs a collective. Algorithms are self-describing records;
// the default choice is a small table by rank count and size, and one
// FERRY_TUNE string overrides it, e.g. "allreduce:0-64K:oneshot,64K-:copyengine".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ferry {

enum class AllreduceAlgorithm : int { kOneShot, kTwoShot, kCopyEngine, kCount };

struct AlgorithmInfo {
  AllreduceAlgorithm id;
  const char* name;
  const char* description;
  bool in_place_safe;  // may run when outputs alias inputs
};

const AlgorithmInfo& algorithm_info(AllreduceAlgorithm algorithm);

// One FERRY_TUNE rule: sizes in [min_bytes, max_bytes) use algorithm.
struct TuneRule {
  std::size_t min_bytes;
  std::size_t max_bytes;
  AllreduceAlgorithm algorithm;
};

// Parses "allreduce:LO-HI:name,..." (sizes with K/M/G, HI empty = no limit).
// Malformed entries are skipped and described in problems.
std::vector<TuneRule> parse_tune(const std::string& text, std::vector<std::string>* problems);

// The choice for this call: FERRY_TUNE's rule for bytes if one matches and
// is safe for the call, else the default. Every rank computes the same
// answer from the same inputs.
AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place,
                                    const std::vector<TuneRule>& rules);
AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place);

}  // namespace ferry
