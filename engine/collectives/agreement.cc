#include "engine/collectives/agreement.h"

#include "engine/common/log.h"

namespace ferry {
namespace {

std::uint64_t block_hash(int sender, int receiver, std::uint64_t bytes) {
  std::uint64_t z = (static_cast<std::uint64_t>(sender) << 32 | static_cast<std::uint32_t>(receiver)) ^
                    (bytes * 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

CallSignature reduction_signature(std::size_t count, DataType type, ReduceOp op) {
  CallSignature s;
  s.count = count;
  s.type = static_cast<std::int16_t>(type);
  s.op = static_cast<std::int16_t>(op);
  return s;
}

CallSignature rooted_signature(std::size_t bytes, int root) {
  CallSignature s;
  s.count = bytes;
  s.root = root;
  return s;
}

CallSignature exchange_signature(int rank, int ranks, const std::size_t* send_bytes, const std::size_t* recv_bytes) {
  CallSignature s;
  for (int peer = 0; peer < ranks; ++peer) {
    s.sent += block_hash(rank, peer, send_bytes[peer]);
    s.received += block_hash(peer, rank, recv_bytes[peer]);
  }
  return s;
}

Status compare_signatures(const std::vector<CallSignature>& all, const char* collective) {
  if (all.empty()) return Status::kOk;
  std::uint64_t sent = 0, received = 0;
  for (const CallSignature& s : all) {
    sent += s.sent;
    received += s.received;
  }
  const CallSignature& first = all[0];
  for (int r = 1; r < static_cast<int>(all.size()); ++r) {
    const CallSignature& s = all[r];
    if (s.root != first.root) {
      FERRY_WARN(Coll, "%s: rank 0 passed root %d, rank %d root %d", collective, first.root, r, s.root);
      return Status::kRootMismatch;
    }
    if (s.count != first.count) {
      FERRY_WARN(Coll, "%s: rank 0 passed a count of %llu, rank %d %llu", collective,
                 static_cast<unsigned long long>(first.count), r, static_cast<unsigned long long>(s.count));
      return Status::kCountMismatch;
    }
    if (s.type != first.type) {
      FERRY_WARN(Coll, "%s: rank 0 and rank %d passed different datatypes", collective, r);
      return Status::kTypeMismatch;
    }
    if (s.op != first.op) {
      FERRY_WARN(Coll, "%s: rank 0 and rank %d passed different reduction operations", collective, r);
      return Status::kOpMismatch;
    }
  }
  if (sent != received) {
    FERRY_WARN(Coll, "%s: what some rank sends another differs from what that rank receives from it", collective);
    return Status::kCountMismatch;
  }
  return Status::kOk;
}

}  // namespace ferry
