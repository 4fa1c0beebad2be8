// Fuzzes the FERRY_TUNE parser (tuner.h) with arbitrary text. Contracts
// checked: every rule kept names a real algorithm of its collective and a
// non-empty size range, and the choices made from the rules are ones the
// engine can run.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/collectives/tuner.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using ferry::AllreduceAlgorithm;
  using ferry::BcastAlgorithm;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> problems;
  const std::vector<ferry::TuneRule> rules = ferry::parse_tune(text, &problems);
  for (const ferry::TuneRule& rule : rules) {
    if (rule.min_bytes >= rule.max_bytes) std::abort();
    switch (rule.collective) {
      case ferry::TunedCollective::kAllreduce:
        if (!(rule.algorithm < AllreduceAlgorithm::kCount)) std::abort();
        break;
      case ferry::TunedCollective::kBcast:
        if (!(rule.bcast < BcastAlgorithm::kCount)) std::abort();
        break;
      default:
        if (!(rule.across < ferry::AcrossAlgorithm::kCount)) std::abort();
    }
  }
  for (const std::string& problem : problems)
    if (problem.empty()) std::abort();
  // Sizes a device buffer can have (the model walks a call's chunks).
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{1} << 20,
                            (std::size_t{1} << 31) + 3}) {
    for (int nranks : {1, 2, 3, 8}) {
      if (!(ferry::choose_allreduce(nranks, bytes, false, rules) < AllreduceAlgorithm::kCount)) std::abort();
      if (!(ferry::choose_allreduce(nranks, bytes, true, rules) < AllreduceAlgorithm::kCount)) std::abort();
    }
    if (ferry::tuned_bcast(rules, bytes) > BcastAlgorithm::kCount) std::abort();
    const ferry::LinkCost& network = ferry::link_cost(ferry::LinkKind::kNet);
    for (int machines : {2, 3, 4096}) {
      if (!(ferry::choose_allreduce_across(rules, bytes, bytes / 2, machines, network) < ferry::AcrossAlgorithm::kCount))
        std::abort();
      if (!(ferry::choose_bcast_across(rules, bytes, machines, network) < ferry::AcrossAlgorithm::kCount)) std::abort();
    }
  }
  return 0;
}
