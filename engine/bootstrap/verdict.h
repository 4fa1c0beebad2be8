// The end of a collective set-up step: every rank leaves with the same
// answer, so none goes on with peers that gave up.
#pragma once

#include "engine/bootstrap/bootstrap.h"
#include "engine/common/status.h"

namespace ferry {

// Collective over bootstrap: kOk on every rank where every rank's local is
// kOk; else a failing rank returns its own local, and the others
// kUnavailable, with a WARN "<who>: rank R of N <what> (see its log)" naming
// the first rank that failed.
Status agree_on_setup(Bootstrap& bootstrap, Status local, const char* who, const char* what);

}  // namespace ferry
