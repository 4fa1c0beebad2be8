// Typed access to Ferry's parameters, one table (params.def).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

struct Params {
#define FERRY_PARAM_TYPE_String std::string
#define FERRY_PARAM_TYPE_Int std::int64_t
#define FERRY_PARAM_TYPE_Bool bool
#define FERRY_PARAM(field, type, default_value, category, description) \
  FERRY_PARAM_TYPE_##type field;
#include "engine/common/params.def"
#undef FERRY_PARAM
};

// Parsed once from the environment on first use; thread-safe.
const Params& params();

// Parses "NAME=value" entries. A malformed value, or one outside what its
// parameter takes (one of a few words, matched without regard to case; an
// integer range), is described in problems and the default used instead.
// FERRY_* names that are no parameter are described in unknown_names (in
// problems when that is null).
Params parse_params(const std::vector<std::string>& environment, std::vector<std::string>* problems,
                    std::vector<std::string>* unknown_names = nullptr);

struct ParamInfo {
  std::string env_name;       // FERRY_ROUTE
  const char* type;           // String, Int, Bool
  const char* default_value;
  const char* category;
  const char* description;
  std::string value;          // as in effect now
  bool set_in_environment;
};

// Every parameter with its current value, in table order.
std::vector<ParamInfo> describe_params();

// Warnings about FERRY_* variables that are set but unknown, or malformed.
std::vector<std::string> param_problems();
// Only those about values (MPI_Init prints them on rank 0), and only those
// about names.
std::vector<std::string> param_value_problems();
std::vector<std::string> param_unknown_names();

}  // namespace ferry
