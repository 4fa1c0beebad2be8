// Collectives over the LL protocol on the engine worker: flags travel with
// the data, so a call needs no closing exchange.
#include "engine/collectives/algorithms/algorithms.h"

#include <algorithm>
#include <vector>

#include "engine/collectives/worker.h"
#include "engine/collectives/worker_common.h"

namespace ferry::coll {
namespace {

// Worker blocks for an LL call that moves bytes per rank: one block answers
// small calls without handing the item to the others; larger ones take a
// block per kLlBytesPerSharingBlock (worker.h; tuner.cc models both).
int ll_blocks(Communicator& comm, const Placement& where, std::size_t bytes) {
  return ll_share_blocks(bytes, comm.worker_for(where.backend, where.device)->blocks());
}

// Fills what the arguments of every LL call share (LlAllreduceArgs,
// LlBcastArgs, LlAlltoallvArgs): the call's flag and buffer half, the wait
// limit, every rank's receive buffer, and who is who.
template <typename LlArgs>
Status prepare_ll_call(Communicator& comm, const Placement& where, LlArgs* args) {
  Communicator::LlChannel* channel = nullptr;
  FERRY_CHECK(comm.ll_channel(where.backend, where.device, &channel));
  const std::uint64_t call = ++channel->calls;
  args->flag = doorbell_flag(call);
  args->parity = static_cast<std::uint32_t>(call % 2);
  args->timeout_ms = static_cast<std::uint32_t>(std::min<std::int64_t>(params().handshake_timeout, 1 << 20) * 1000);
  comm.list_ll_buffers(*channel, args);
  t_ran_on_worker = true;
  return Status::kOk;
}

}  // namespace

bool ll_ready(Communicator& comm, const PeerReach& reach, const Placement& where, std::size_t largest) {
  return reach.mapped && largest <= ll_call_max_bytes(comm.size()) && where.backend &&
         comm.ll_possible(where.backend, where.device);
}

Status run_ll_allreduce(Communicator& comm, const Placement& where, WorkKind kind, const void* input, void* output,
                        std::size_t count, DataType type, ReduceOp op) {
  WorkItem item{};
  item.kind = kind;
  item.blocks = ll_blocks(comm, where, count * data_type_size(type));
  FERRY_CHECK(prepare_ll_call(comm, where, &item.ll));
  item.ll.input = input;
  item.ll.output = output;
  item.ll.count = count;
  item.ll.type = type;
  item.ll.op = op;
  return comm.worker_for(where.backend, where.device)->run(item);
}

Status run_ll_bcast(Communicator& comm, const Placement& where, void* buffer, std::size_t bytes, int root) {
  WorkItem item{};
  item.kind = WorkKind::kLlBcast;
  item.blocks = ll_blocks(comm, where, bytes);
  FERRY_CHECK(prepare_ll_call(comm, where, &item.ll_bcast));
  item.ll_bcast.buffer = buffer;
  item.ll_bcast.bytes = bytes;
  item.ll_bcast.root = root;
  return comm.worker_for(where.backend, where.device)->run(item);
}

Status run_ll_alltoallv(Communicator& comm, const Placement& where, const void* send, const std::size_t* send_bytes,
                        const std::size_t* send_offsets, void* recv, const std::size_t* recv_bytes,
                        const std::size_t* recv_offsets) {
  WorkItem item{};
  item.kind = WorkKind::kLlAlltoallv;
  LlAlltoallvArgs& a = item.ll_alltoallv;
  FERRY_CHECK(prepare_ll_call(comm, where, &a));
  const int n = comm.size();
  std::vector<LlBlocks> blocks(n);
  std::size_t sent = 0;
  for (int r = 0; r < n; ++r) {
    blocks[r] = {at(send, send_offsets[r]), send_bytes[r], at(recv, recv_offsets[r]), recv_bytes[r]};
    if (r < kInlineRanks) {
      a.send[r] = blocks[r].send;
      a.send_bytes[r] = blocks[r].send_bytes;
      a.recv[r] = blocks[r].recv;
      a.recv_bytes[r] = blocks[r].recv_bytes;
    }
    sent += send_bytes[r];
  }
  // Past kInlineRanks, the channel's block table: the worker is done with
  // the previous call's (Worker::run returns once it ran).
  if (n > kInlineRanks) {
    Communicator::LlChannel* channel = nullptr;
    FERRY_CHECK(comm.ll_channel(where.backend, where.device, &channel));
    FERRY_CHECK(where.backend->copy(channel->block_table, blocks.data(), n * sizeof(LlBlocks)));
    a.block_table = static_cast<const LlBlocks*>(channel->block_table);
  }
  item.blocks = ll_blocks(comm, where, sent);
  return comm.worker_for(where.backend, where.device)->run(item);
}

}  // namespace ferry::coll
