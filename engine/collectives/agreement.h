// What each rank passed to a collective, carried in the engine's handshake:
// ranks that disagree (a count, a root, a type or op, alltoallv's counts
// between a pair) all return an error at once, before any data moves,
// instead of one rank returning wrong data while another waits for data
// that never comes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/common/status.h"
#include "engine/common/types.h"

namespace ferry {

struct CallSignature {
  std::uint64_t count = 0;  // elements (allreduce), bytes (bcast)
  // Alltoallv: the sums over this rank's blocks of a hash of (sender,
  // receiver, bytes), one over what it sends and one over what it
  // receives; over all ranks the two sums are equal when every pair agrees.
  std::uint64_t sent = 0, received = 0;
  std::int32_t root = -1;           // bcast
  std::int16_t type = -1, op = -1;  // allreduce
};
static_assert(sizeof(CallSignature) == 32, "CallSignature travels between processes; keep its layout fixed");

CallSignature reduction_signature(std::size_t count, DataType type, ReduceOp op);
CallSignature rooted_signature(std::size_t bytes, int root);
CallSignature exchange_signature(int rank, int ranks, const std::size_t* send_bytes, const std::size_t* recv_bytes);

// kOk when every rank passed the same; else what differs first:
// kCountMismatch (a count, or alltoallv's counts between some pair),
// kRootMismatch, kTypeMismatch, kOpMismatch. Logs the ranks that differ
// under FERRY_DEBUG=WARN.
Status compare_signatures(const std::vector<CallSignature>& all, const char* collective);

}  // namespace ferry
