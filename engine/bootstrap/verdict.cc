#include "engine/bootstrap/verdict.h"

#include <cstdint>
#include <vector>

#include "engine/common/log.h"

namespace ferry {

Status agree_on_setup(Bootstrap& bootstrap, Status local, const char* who, const char* what) {
  const std::int32_t verdict = ok(local) ? 0 : 1;
  std::vector<std::int32_t> verdicts(static_cast<std::size_t>(bootstrap.size()));
  FERRY_CHECK(bootstrap.allgather(&verdict, verdicts.data(), sizeof(verdict)));
  if (!ok(local)) return local;
  for (int r = 0; r < bootstrap.size(); ++r)
    if (verdicts[r]) {
      FERRY_WARN(Transport, "%s: rank %d of %d %s (see its log)", who, r, bootstrap.size(), what);
      return Status::kUnavailable;
    }
  return Status::kOk;
}

}  // namespace ferry
