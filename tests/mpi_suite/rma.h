// The cases of rma_windows.cc that rma.cc's main runs, in its order.
#pragma once

#include "rma_common.h"

namespace suite {

void attributes(Flavor flavor);
void shared_query();
void bad_calls();
void host_window_beside_device_window();
void host_window_device_buffers();
void window_outlives_communicator(Flavor flavor);

}  // namespace suite
