// Collectives where the leader of each GPU does the device work of its ranks.
#include "engine/collectives/algorithms/algorithms.h"

#include <algorithm>

#include "engine/core/executor.h"

namespace ferry::coll {

Status run_allreduce_by_gpu_leaders(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                                    const void* input, void* output, std::size_t count, DataType type, ReduceOp op) {
  const int me = comm.rank();
  if (comm.gpu_leader(me) != me) return Status::kOk;
  const int part = comm.gpu_leaders_before_me(), leaders = comm.gpu_leader_count();
  FERRY_TRACE(Coll, "allreduce of %zu elements: slice %d of %d for every rank, as its GPU's leader", count, part,
              leaders);
  MappedBuffers buffers{};
  FERRY_CHECK(map_all(comm, all, input, output, /*need_outputs=*/true, &buffers));
  return run_direct_reduce(comm, buffers, where, count, type, op, direct_part(part, leaders, count, type),
                           /*one_shot=*/false);
}

Status run_bcast_by_gpu_leaders(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                                void* buffer, std::size_t bytes, int root) {
  const int me = comm.rank();
  if (comm.gpu_leader(me) != me) return Status::kOk;
  std::vector<int> receivers;
  std::vector<ExportedBuffer> wanted;
  for (int r = 0; r < comm.size(); ++r) {
    if (r == root || comm.gpu_leader(r) != me) continue;
    receivers.push_back(r);
    if (r != me) wanted.push_back(all[r].first);
  }
  if (receivers.empty()) return Status::kOk;
  FERRY_TRACE(Coll, "bcast of %zu bytes into %zu ranks' buffers, as their GPU's leader", bytes, receivers.size());
  if (root != me) wanted.push_back(all[root].first);
  std::vector<void*> mapped(wanted.size());
  FERRY_CHECK(comm.peer_memory().import_buffers(wanted.data(), wanted.size(), mapped.data()));
  const void* source = root == me ? buffer : mapped.back();
  gpu::Stream stream = nullptr;
  FERRY_CHECK(where.backend->set_device(where.device));
  FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &stream));
  CopyListLauncher copies(where.backend, stream);
  std::size_t next = 0;
  for (int r : receivers) FERRY_CHECK(copies.add(r == me ? buffer : mapped[next++], source, bytes));
  FERRY_CHECK(copies.finish());
  return synchronize_stream(where.backend, stream);
}

Status run_alltoallv_by_gpu_leaders(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                                    const void* send, void* recv, const std::vector<std::uint64_t>& layouts) {
  const int n = comm.size();
  const int me = comm.rank();
  if (comm.gpu_leader(me) != me) return Status::kOk;
  const auto layout = [&](int rank, int table, int peer) {
    return layouts[(static_cast<std::size_t>(rank) * 3 + table) * n + peer];
  };
  enum { kSendOffsets, kRecvOffsets, kRecvBytes };
  // Every peer's send buffer and the receive buffers of this GPU's ranks.
  std::vector<ExportedBuffer> wanted;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    wanted.push_back(all[r].first);
    if (comm.gpu_leader(r) == me) wanted.push_back(all[r].second);
  }
  std::vector<void*> mapped(wanted.size());
  FERRY_CHECK(comm.peer_memory().import_buffers(wanted.data(), wanted.size(), mapped.data()));
  std::vector<const void*> sends(n, send);
  std::vector<void*> recvs(n, recv);
  for (int r = 0, i = 0; r < n; ++r) {
    if (r == me) continue;
    sends[r] = mapped[i++];
    if (comm.gpu_leader(r) == me) recvs[r] = mapped[i++];
  }
  gpu::Stream stream = nullptr;
  FERRY_CHECK(where.backend->set_device(where.device));
  FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &stream));
  // One kernel a list of blocks.
  CopyListLauncher blocks(where.backend, stream);
  for (int receiver = 0; receiver < n; ++receiver) {
    if (comm.gpu_leader(receiver) != me) continue;
    for (int sender = 0; sender < n; ++sender)
      FERRY_CHECK(blocks.add(at(recvs[receiver], layout(receiver, kRecvOffsets, sender)),
                             at(sends[sender], layout(sender, kSendOffsets, receiver)),
                             layout(receiver, kRecvBytes, sender)));
  }
  FERRY_CHECK(blocks.finish());
  FERRY_TRACE(Coll, "alltoallv: %d blocks into the buffers of its GPU's ranks, as their leader", blocks.copies());
  return synchronize_stream(where.backend, stream);
}

}  // namespace ferry::coll
