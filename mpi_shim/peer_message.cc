#include "mpi_shim/peer_message.h"

#include <vector>

namespace ferry::shim::peer {

std::int64_t message_bytes(int count, MPI_Datatype type) {
  int size = 0;
  if (count < 0 || PMPI_Type_size(type, &size) != MPI_SUCCESS) return -1;
  return static_cast<std::int64_t>(count) * size;
}

bool packed_layout(MPI_Datatype type) {
  int integers = 0, addresses = 0, types = 0, combiner = MPI_UNDEFINED;
  if (PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner) != MPI_SUCCESS) return false;
  if (combiner == MPI_COMBINER_NAMED) return true;
  if ((combiner != MPI_COMBINER_CONTIGUOUS && combiner != MPI_COMBINER_DUP) || types != 1) return false;
  std::vector<int> ints(integers);
  std::vector<MPI_Aint> addrs(addresses);
  MPI_Datatype inner = MPI_DATATYPE_NULL;
  if (PMPI_Type_get_contents(type, integers, addresses, types, ints.data(), addrs.data(), &inner) != MPI_SUCCESS)
    return false;
  const bool packed = packed_layout(inner);
  // A derived type that get_contents returns is the caller's to free.
  int inner_integers = 0, inner_addresses = 0, inner_types = 0, inner_combiner = MPI_UNDEFINED;
  PMPI_Type_get_envelope(inner, &inner_integers, &inner_addresses, &inner_types, &inner_combiner);
  if (inner_combiner != MPI_COMBINER_NAMED) PMPI_Type_free(&inner);
  if (!packed) return false;
  MPI_Aint lb = 0, extent = 0;
  int size = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  PMPI_Type_size(type, &size);
  return lb == 0 && extent == size;
}

Envelope data_envelope(const Eligible& e, int tag) {
  Envelope env{};
  env.comm_id = e.to.comm_id;
  env.tag = tag;
  env.kind = EnvelopeKind::kPeerMemory;
  env.bytes = static_cast<std::uint64_t>(e.bytes);
  env.reply_tag = next_reply_tag();
  env.claim_slot = -1;
  return env;
}

int send_marker(Mode mode, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
  switch (mode) {
    case Mode::kSynchronous:
      return request ? PMPI_Issend(nullptr, 0, MPI_BYTE, dest, tag, comm, request)
                     : PMPI_Ssend(nullptr, 0, MPI_BYTE, dest, tag, comm);
    case Mode::kReady:
      return request ? PMPI_Irsend(nullptr, 0, MPI_BYTE, dest, tag, comm, request)
                     : PMPI_Rsend(nullptr, 0, MPI_BYTE, dest, tag, comm);
    default:
      return request ? PMPI_Isend(nullptr, 0, MPI_BYTE, dest, tag, comm, request)
                     : PMPI_Send(nullptr, 0, MPI_BYTE, dest, tag, comm);
  }
}

Counters& counters() {
  static auto* c = new Counters;
  return *c;
}

}  // namespace ferry::shim::peer
