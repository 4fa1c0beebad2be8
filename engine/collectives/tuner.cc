#include "engine/collectives/tuner.h"

#include <cstdlib>

#include "engine/common/log.h"
#include "engine/common/params.h"

namespace ferry {
namespace {

constexpr AlgorithmInfo kAllreduceAlgorithms[] = {
    {AllreduceAlgorithm::kOneShot, "oneshot",
     "every rank loads every rank's whole input over peer memory and reduces into its own output", false},
    {AllreduceAlgorithm::kTwoShot, "twoshot",
     "rank r loads slice r of every input, reduces, and stores it into every rank's output", true},
    {AllreduceAlgorithm::kCopyEngine, "copyengine",
     "copy engines pull the peers' slices into scratch, a kernel reduces, copy engines push the result; "
     "pipelined in chunks, SMs mostly idle",
     true},
};
static_assert(sizeof(kAllreduceAlgorithms) / sizeof(kAllreduceAlgorithms[0]) ==
                  static_cast<std::size_t>(AllreduceAlgorithm::kCount),
              "one record per algorithm");

bool parse_size(const std::string& text, std::size_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  switch (*end) {
    case 'K': case 'k': value <<= 10; ++end; break;
    case 'M': case 'm': value <<= 20; ++end; break;
    case 'G': case 'g': value <<= 30; ++end; break;
    default: break;
  }
  if (end == text.c_str() || *end != '\0') return false;
  *out = value;
  return true;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = text.find(separator, start);
    parts.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

AllreduceAlgorithm default_allreduce(int nranks, std::size_t, bool any_in_place) {
  // Copy engines are never the default: on 2x H200 they matched the SM
  // kernels only from 256 MiB up and lost below (bench/RESULTS.md); they are
  // there for FERRY_TUNE when the SMs are wanted for other work.
  // One-shot moves (n-1) * bytes into each rank, two-shot 2 (n-1)/n * bytes:
  // equal at two ranks, where one-shot needs no remote stores.
  return nranks <= 2 && !any_in_place ? AllreduceAlgorithm::kOneShot : AllreduceAlgorithm::kTwoShot;
}

}  // namespace

const AlgorithmInfo& algorithm_info(AllreduceAlgorithm algorithm) {
  return kAllreduceAlgorithms[static_cast<int>(algorithm)];
}

std::vector<TuneRule> parse_tune(const std::string& text, std::vector<std::string>* problems) {
  std::vector<TuneRule> rules;
  if (text.empty()) return rules;
  // An entry without a collective continues the one before it:
  // "allreduce:0-64K:oneshot,64K-:copyengine".
  std::string collective;
  for (const std::string& entry : split(text, ',')) {
    std::vector<std::string> fields = split(entry, ':');
    if (fields.size() == 2 && !collective.empty()) fields.insert(fields.begin(), collective);
    const std::vector<std::string> range = fields.size() == 3 ? split(fields[1], '-') : std::vector<std::string>{};
    TuneRule rule{0, ~std::size_t{0}, AllreduceAlgorithm::kCount};
    bool valid = fields.size() == 3 && fields[0] == "allreduce" && range.size() == 2 &&
                 (range[0].empty() || parse_size(range[0], &rule.min_bytes)) &&
                 (range[1].empty() || parse_size(range[1], &rule.max_bytes));
    for (const AlgorithmInfo& info : kAllreduceAlgorithms)
      if (valid && fields[2] == info.name) rule.algorithm = info.id;
    if (!valid || rule.algorithm == AllreduceAlgorithm::kCount || rule.min_bytes >= rule.max_bytes) {
      problems->push_back("FERRY_TUNE entry '" + entry +
                          "' is not [collective:]MIN-MAX:algorithm (collective: allreduce; algorithms: oneshot, "
                          "twoshot, copyengine)");
      continue;
    }
    collective = fields[0];
    rules.push_back(rule);
  }
  return rules;
}

AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place,
                                    const std::vector<TuneRule>& rules) {
  for (const TuneRule& rule : rules) {
    if (bytes < rule.min_bytes || bytes >= rule.max_bytes) continue;
    if (any_in_place && !algorithm_info(rule.algorithm).in_place_safe) break;
    return rule.algorithm;
  }
  return default_allreduce(nranks, bytes, any_in_place);
}

AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place) {
  static const std::vector<TuneRule> rules = [] {
    std::vector<std::string> problems;
    std::vector<TuneRule> parsed = parse_tune(params().tune, &problems);
    for (const std::string& problem : problems) FERRY_WARN(Coll, "%s", problem.c_str());
    return parsed;
  }();
  const AllreduceAlgorithm choice = choose_allreduce(nranks, bytes, any_in_place, rules);
  FERRY_TRACE(Coll, "allreduce of %zu bytes on %d ranks: %s", bytes, nranks, algorithm_info(choice).name);
  return choice;
}

}  // namespace ferry
