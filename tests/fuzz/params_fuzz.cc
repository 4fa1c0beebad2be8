// Fuzzes the parameter parser (params.h): each input line is one
// environment entry ("FERRY_NAME=value"). Contracts checked: parsing never
// fails outright, every problem is described, and parsing is a function of
// its input (the same entries give the same parameters and problems).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/common/params.h"

namespace {

bool same(const ferry::Params& a, const ferry::Params& b) {
#define FERRY_PARAM(field, type, default_value, category, description) \
  if (!(a.field == b.field)) return false;
#include "engine/common/params.def"
#undef FERRY_PARAM
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> environment;
  std::string line;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      environment.push_back(line);
      line.clear();
    } else {
      line += static_cast<char>(data[i]);
    }
  }
  environment.push_back(line);
  std::vector<std::string> problems, unknown;
  const ferry::Params first = ferry::parse_params(environment, &problems, &unknown);
  for (const std::string& problem : problems)
    if (problem.empty()) std::abort();
  std::vector<std::string> problems_again, unknown_again;
  const ferry::Params second = ferry::parse_params(environment, &problems_again, &unknown_again);
  if (!same(first, second) || problems != problems_again || unknown != unknown_again) std::abort();
  return 0;
}
