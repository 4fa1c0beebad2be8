// The host name Ferry gives this process: FERRY_HOSTNAME when set (virtual
// nodes: several ranks of one machine taking different host identities),
// else the machine's. Every part that names or compares hosts asks here.
#pragma once

#include <string>

namespace ferry {

// Read once; the same for the life of the process.
const std::string& host_name();

// pattern with %h replaced by host_name() and %p by the process id; any
// other % is kept as it is.
std::string expand_host_and_pid(const std::string& pattern);

}  // namespace ferry
