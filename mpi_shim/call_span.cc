#include "mpi_shim/call_span.h"

namespace ferry::shim {

thread_local CallSpan* CallSpan::current_ = nullptr;

void CallSpan::close() {
  current_ = outer_;
  std::string args;
  if (routed_)
    args = std::string("\"route\":\"") + route_name(route_) + "\",\"why\":\"" + trace_escape(reason_) + "\"";
  if (bytes_ > 0) args += (args.empty() ? "" : ",") + std::string("\"bytes\":") + std::to_string(bytes_);
  for (int i = 0; i < ranks_noted_; ++i)
    args += (args.empty() ? "\"" : ",\"") + std::string(rank_roles_[i]) + "\":" + std::to_string(ranks_[i]);
  trace_span(function_name(id_), "mpi", start_us_, trace_now_us(), args);
}

}  // namespace ferry::shim
