// MPI_BOTTOM with struct types built from absolute addresses of device
// buffers: MPI_Send/MPI_Recv (also from plain device buffers, which Ferry
// sends through peer memory), MPI_Bcast, MPI_Gatherv and MPI_Alltoallw name
// their memory only through the datatype; the data must arrive as with
// ordinary buffers. A type whose blocks lie in host and
// device memory, or in two device allocations, gets MPI_ERR_BUFFER through
// the communicator's error handler and changes nothing.
#include <cstring>

#include "suite.h"

namespace {

using namespace suite;

// count int32 at buffer, as a struct type of one block at its absolute address.
MPI_Datatype absolute(const void* buffer, int count) {
  MPI_Aint address = 0;
  MPI_Get_address(buffer, &address);
  MPI_Datatype type = MPI_DATATYPE_NULL;
  const int lengths[1] = {count};
  const MPI_Datatype types[1] = {MPI_INT32_T};
  MPI_Type_create_struct(1, lengths, &address, types, &type);
  MPI_Type_commit(&type);
  return type;
}

// Two blocks: count int32 at a and count at b.
MPI_Datatype absolute_pair(const void* a, const void* b, int count) {
  MPI_Aint addresses[2] = {0, 0};
  MPI_Get_address(a, &addresses[0]);
  MPI_Get_address(b, &addresses[1]);
  MPI_Datatype type = MPI_DATATYPE_NULL;
  const int lengths[2] = {count, count};
  const MPI_Datatype types[2] = {MPI_INT32_T, MPI_INT32_T};
  MPI_Type_create_struct(2, lengths, addresses, types, &type);
  MPI_Type_commit(&type);
  return type;
}

void test_calls(int count) {
  const int rank = world_rank(), size = world_size();
  const Memory device = Memory::device;
  {  // Send/Recv around a ring.
    const uint64_t id = next_case_id();
    const Case what{"MPI_Send/MPI_Recv", "struct at MPI_BOTTOM", "", count, "device"};
    Buffer out = make_buffer(random_values<int32_t>(count, id, rank), device, 4);
    Buffer in = make_buffer(poisoned<int32_t>(count), device, 4);
    MPI_Datatype out_type = absolute(out.data(), count), in_type = absolute(in.data(), count);
    MPI_Request request;
    check_mpi(MPI_Irecv(MPI_BOTTOM, 1, in_type, (rank + size - 1) % size, 3, MPI_COMM_WORLD, &request), what);
    check_mpi(MPI_Send(MPI_BOTTOM, 1, out_type, (rank + 1) % size, 3, MPI_COMM_WORLD), what);
    check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
    expect_buffer(what, in, random_values<int32_t>(count, id, (rank + size - 1) % size));
    MPI_Type_free(&out_type);
    MPI_Type_free(&in_type);
  }
  {  // A plain device buffer sent (through peer memory where Ferry can),
     // received at MPI_BOTTOM, blocking and nonblocking.
    for (bool blocking : {true, false}) {
      const uint64_t id = next_case_id();
      const Case what{blocking ? "MPI_Send/MPI_Recv" : "MPI_Isend/MPI_Irecv", "MPI_INT32_T to struct at MPI_BOTTOM", "",
                      count, "device"};
      Buffer out = make_buffer(random_values<int32_t>(count, id, rank), device);
      Buffer in = make_buffer(poisoned<int32_t>(count), device, 4);
      MPI_Datatype in_type = absolute(in.data(), count);
      const int from = (rank + size - 1) % size, to = (rank + 1) % size;
      MPI_Request requests[2];
      if (blocking) {
        check_mpi(MPI_Sendrecv(out.data(), count, MPI_INT32_T, to, 4, MPI_BOTTOM, 1, in_type, from, 4, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE),
                  what);
      } else {
        check_mpi(MPI_Irecv(MPI_BOTTOM, 1, in_type, from, 4, MPI_COMM_WORLD, &requests[0]), what);
        check_mpi(MPI_Isend(out.data(), count, MPI_INT32_T, to, 4, MPI_COMM_WORLD, &requests[1]), what);
        check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), what);
      }
      expect_buffer(what, in, random_values<int32_t>(count, id, from));
      MPI_Type_free(&in_type);
    }
  }
  {  // Bcast from the last rank.
    const uint64_t id = next_case_id();
    const int root = size - 1;
    const Case what{"MPI_Bcast", "struct at MPI_BOTTOM", "", count, "device", "root=" + std::to_string(root)};
    const std::vector<int32_t> data = random_values<int32_t>(count, id, root);
    Buffer buffer = make_buffer(rank == root ? data : poisoned<int32_t>(count), device, 4);
    MPI_Datatype type = absolute(buffer.data(), count);
    check_mpi(MPI_Bcast(MPI_BOTTOM, 1, type, root, MPI_COMM_WORLD), what);
    expect_buffer(what, buffer, data);
    MPI_Type_free(&type);
  }
  {  // Gatherv: every rank sends from MPI_BOTTOM, the root receives at
     // MPI_BOTTOM: rank r's block is element r of a type whose one block
     // sits at the receive buffer's absolute address.
    const uint64_t id = next_case_id();
    const Case what{"MPI_Gatherv", "struct at MPI_BOTTOM", "", count, "device", "root=0"};
    Buffer out = make_buffer(random_values<int32_t>(count, id, rank), device);
    Buffer in = make_buffer(poisoned<int32_t>(size_t(count) * size), device);
    MPI_Datatype out_type = absolute(out.data(), count), in_type = absolute(in.data(), count);
    std::vector<int> counts(size, 1), displs(size);
    for (int r = 0; r < size; ++r) displs[r] = r;
    check_mpi(
        MPI_Gatherv(MPI_BOTTOM, 1, out_type, MPI_BOTTOM, counts.data(), displs.data(), in_type, 0, MPI_COMM_WORLD),
        what);
    if (rank == 0) {
      std::vector<int32_t> expected;
      for (int r = 0; r < size; ++r) {
        const std::vector<int32_t> theirs = random_values<int32_t>(count, id, r);
        expected.insert(expected.end(), theirs.begin(), theirs.end());
      }
      expect_buffer(what, in, expected);
    }
    MPI_Type_free(&in_type);
    MPI_Type_free(&out_type);
  }
  {  // Alltoallw with every buffer at MPI_BOTTOM (mpi4py's testAlltoallwBottom).
    const uint64_t id = next_case_id();
    const Case what{"MPI_Alltoallw", "struct at MPI_BOTTOM", "", count, "device"};
    Buffer out = make_buffer(random_values<int32_t>(size_t(count) * size, id, rank), device, 4);
    Buffer in = make_buffer(poisoned<int32_t>(size_t(count) * size), device, 4);
    std::vector<MPI_Datatype> send_types(size), recv_types(size);
    for (int p = 0; p < size; ++p) {
      send_types[p] = absolute(static_cast<int32_t*>(out.data()) + size_t(p) * count, count);
      recv_types[p] = absolute(static_cast<int32_t*>(in.data()) + size_t(p) * count, count);
    }
    std::vector<int> ones(size, 1), zeros(size, 0);
    check_mpi(MPI_Alltoallw(MPI_BOTTOM, ones.data(), zeros.data(), send_types.data(), MPI_BOTTOM, ones.data(),
                            zeros.data(), recv_types.data(), MPI_COMM_WORLD),
              what);
    std::vector<int32_t> expected;
    for (int p = 0; p < size; ++p) {
      const std::vector<int32_t> theirs = random_values<int32_t>(size_t(count) * size, id, p);
      expected.insert(expected.end(), theirs.begin() + size_t(rank) * count, theirs.begin() + size_t(rank + 1) * count);
    }
    expect_buffer(what, in, expected);
    for (int p = 0; p < size; ++p) {
      MPI_Type_free(&send_types[p]);
      MPI_Type_free(&recv_types[p]);
    }
  }
}

// Blocks in host and device memory, or in two device allocations: refused.
void test_mixed_regions() {
  if (std::strcmp(suite_device_backend(), "host") == 0) return;  // the real MPI alone takes any memory
  const int count = 16;
  const int rank = world_rank(), size = world_size();
  const std::vector<int32_t> data = random_values<int32_t>(count, next_case_id(), rank);
  Buffer device_a = make_buffer(data, Memory::device), device_b = make_buffer(data, Memory::device);
  Buffer host = make_buffer(data, Memory::host);
  for (auto [second, name] : {std::pair{&host, "host and device"}, std::pair{&device_b, "two device allocations"}}) {
    const Case what{"MPI_Sendrecv", "struct at MPI_BOTTOM", "", count, name};
    MPI_Datatype type = absolute_pair(device_a.data(), second->data(), count);
    MPI_Status status;
    const int rc = MPI_Sendrecv(MPI_BOTTOM, 1, type, (rank + 1) % size, 9, MPI_BOTTOM, 1, type,
                                (rank + size - 1) % size, 9, MPI_COMM_WORLD, &status);
    int error_class = MPI_SUCCESS;
    MPI_Error_class(rc, &error_class);
    expect(error_class == MPI_ERR_BUFFER, what, "expected MPI_ERR_BUFFER, got " + std::to_string(error_class));
    expect_buffer(what, device_a, data);
    MPI_Type_free(&type);
  }
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  for (int count : {1, 7, 1023}) test_calls(count);
  test_mixed_regions();
  return suite::finish();
}
