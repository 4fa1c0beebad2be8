// Collectives over the shm transport: host shared-memory segments.
#include "engine/collectives/algorithms/algorithms.h"

#include <algorithm>
#include <cstring>

#include "engine/core/executor.h"

namespace ferry::coll {

Status run_shm_allreduce(Communicator& comm, const Placement& where, const void* input, void* output,
                         std::size_t count, DataType type, ReduceOp op) {
  SharedSegments& shm = *comm.shm();
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t element = data_type_size(type);
  const std::size_t align = std::max<std::size_t>(1, 16 / element);
  // Each segment holds an input area and an output area.
  const std::size_t area = shm.bytes() / 2 / 16 * 16;
  const std::size_t chunk = std::max(align, area / element / align * align);
  gpu::Stream stream = nullptr;
  FERRY_CHECK(where.backend->set_device(where.device));
  FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &stream));
  std::vector<const void*> inputs(n);
  std::vector<void*> outputs(n);
  for (std::size_t begin = 0; begin < count; begin += chunk) {
    const std::size_t elements = std::min(chunk, count - begin);
    FERRY_CHECK(where.backend->copy(shm.segment(me), at(input, begin * element), elements * element));
    FERRY_CHECK(comm.bootstrap().barrier());
    const ElementRange slice = direct_slice(me, n, elements, align);
    DirectReduceArgs args = reduce_of(slice.size(), type, op);
    for (int r = 0; r < n; ++r) {
      inputs[r] = shm.segment(r) + slice.begin * element;
      outputs[r] = shm.segment(r) + area + slice.begin * element;
    }
    FERRY_CHECK(list_direct_pointers(comm, where, stream, inputs, outputs, &args));
    FERRY_CHECK(launch_direct_reduce(where.backend, args, stream));
    FERRY_CHECK(synchronize_stream(where.backend, stream));
    FERRY_CHECK(comm.bootstrap().barrier());
    FERRY_CHECK(where.backend->copy(at(output, begin * element), shm.segment(me) + area, elements * element));
    FERRY_CHECK(comm.bootstrap().barrier());
  }
  return Status::kOk;
}

Status run_shm_bcast(Communicator& comm, const Placement& where, void* buffer, std::size_t bytes, int root) {
  SharedSegments& shm = *comm.shm();
  for (std::size_t begin = 0; begin < bytes; begin += shm.bytes()) {
    const std::size_t length = std::min(shm.bytes(), bytes - begin);
    if (comm.rank() == root) FERRY_CHECK(where.backend->copy(shm.segment(root), at(buffer, begin), length));
    FERRY_CHECK(comm.bootstrap().barrier());
    if (comm.rank() != root) FERRY_CHECK(where.backend->copy(at(buffer, begin), shm.segment(root), length));
    FERRY_CHECK(comm.bootstrap().barrier());
  }
  return Status::kOk;
}

Status run_shm_alltoallv(Communicator& comm, const Placement& where, const void* send, std::size_t send_span,
                         const std::vector<std::uint64_t>& offsets, void* recv, const std::size_t* recv_bytes,
                         const std::size_t* recv_offsets) {
  SharedSegments& shm = *comm.shm();
  const int n = comm.size();
  FERRY_CHECK(where.backend->copy(shm.segment(comm.rank()), send, send_span));
  FERRY_CHECK(comm.bootstrap().barrier());
  for (int peer = 0; peer < n; ++peer) {
    if (recv_bytes[peer] == 0) continue;
    const char* block = shm.segment(peer) + offsets[static_cast<std::size_t>(peer) * n + comm.rank()];
    FERRY_CHECK(where.backend->copy(at(recv, recv_offsets[peer]), block, recv_bytes[peer]));
  }
  return comm.bootstrap().barrier();
}

}  // namespace ferry::coll
