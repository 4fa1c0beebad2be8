// Point-to-point on device buffers between virtual nodes (virtual_node.sh
// gives ranks host names, FERRY_SUITE_RANKS_PER_NODE a name): a message of
// FERRY_NET_MIN_BYTES or more to a rank of the other node goes through the
// net transport's channel (mpi_shim/peer_net.h), the real MPI matching its
// marker; FERRY_STATS counts those sends. Every rank talks with its partner
// on the other node, both ways at once: exchanges that would deadlock if a
// send waited for its own receive's progress (or for a receive completed
// with a later message, or for its sender to call Ferry again), every send
// mode, receives of host memory, wildcards, probes, strided and short
// receives, persistent requests, a freed request, and a communicator of half
// the ranks.
#include <cstring>
#include <string>

#include "suite.h"

namespace {

using namespace suite;

int g_rank = 0, g_size = 0, g_partner = 0;

std::vector<double> values_of(int rank, uint64_t id, long count) { return random_values<double>(count, id, rank); }

void exchange_nonblocking(long count, Memory recv_memory, size_t offset) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Isend/MPI_Irecv exchange", "MPI_DOUBLE", "", count,
                  recv_memory == Memory::device ? "device" : "device to host"};
  Buffer out = make_buffer(values_of(g_rank, id, count), Memory::device, offset);
  Buffer in = make_buffer(poisoned<double>(count), recv_memory, offset);
  MPI_Request requests[2];
  // The send first on both sides: it must not wait for its receive.
  check_mpi(MPI_Isend(out.data(), count, MPI_DOUBLE, g_partner, 11, MPI_COMM_WORLD, &requests[0]), what);
  check_mpi(MPI_Irecv(in.data(), count, MPI_DOUBLE, g_partner, 11, MPI_COMM_WORLD, &requests[1]), what);
  MPI_Status statuses[2];
  check_mpi(MPI_Waitall(2, requests, statuses), what);
  int received = -1;
  MPI_Get_count(&statuses[1], MPI_DOUBLE, &received);
  expect(received == count, what, "status count " + std::to_string(received));
  expect_buffer(what, in, values_of(g_partner, id, count));
}

void blocking_both_ways(long count, int mode) {
  const uint64_t id = next_case_id();
  static const char* const kNames[] = {"MPI_Send", "MPI_Ssend", "MPI_Rsend"};
  const Case what{kNames[mode], "MPI_BYTE", "", count, "device"};
  Buffer out = make_buffer(random_values<uint8_t>(count, id, g_rank), Memory::device, 3);
  Buffer in = make_buffer(poisoned<uint8_t>(count), Memory::device, 5);
  // The lower rank of the pair sends first, then receives.
  const bool first = g_rank < g_partner;
  for (int turn = 0; turn < 2; ++turn) {
    if ((turn == 0) == first) {
      if (mode == 2) check_mpi(MPI_Recv(nullptr, 0, MPI_BYTE, g_partner, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
      const int rc = mode == 0   ? MPI_Send(out.data(), count, MPI_BYTE, g_partner, 12, MPI_COMM_WORLD)
                     : mode == 1 ? MPI_Ssend(out.data(), count, MPI_BYTE, g_partner, 12, MPI_COMM_WORLD)
                                 : MPI_Rsend(out.data(), count, MPI_BYTE, g_partner, 12, MPI_COMM_WORLD);
      check_mpi(rc, what);
    } else {
      MPI_Request request;
      check_mpi(MPI_Irecv(in.data(), count, MPI_BYTE, g_partner, 12, MPI_COMM_WORLD, &request), what);
      // A ready send needs its receive posted: say so.
      if (mode == 2) check_mpi(MPI_Send(nullptr, 0, MPI_BYTE, g_partner, 99, MPI_COMM_WORLD), what);
      check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
    }
  }
  expect_buffer(what, in, random_values<uint8_t>(count, id, g_partner));
}

void sendrecv_both_ways(long count) {
  const uint64_t id = next_case_id();
  {
    const Case what{"MPI_Sendrecv", "MPI_DOUBLE", "", count, "device"};
    Buffer out = make_buffer(values_of(g_rank, id, count), Memory::device);
    Buffer in = make_buffer(poisoned<double>(count), Memory::device, 8);
    check_mpi(MPI_Sendrecv(out.data(), count, MPI_DOUBLE, g_partner, 13, in.data(), count, MPI_DOUBLE, g_partner, 13,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              what);
    expect_buffer(what, in, values_of(g_partner, id, count));
  }
  {
    const Case what{"MPI_Sendrecv_replace", "MPI_DOUBLE", "", count, "device"};
    Buffer buffer = make_buffer(values_of(g_rank, id + 1000, count), Memory::device, 8);
    check_mpi(MPI_Sendrecv_replace(buffer.data(), count, MPI_DOUBLE, g_partner, 14, g_partner, 14, MPI_COMM_WORLD,
                                   MPI_STATUS_IGNORE),
              what);
    expect_buffer(what, buffer, values_of(g_partner, id + 1000, count));
  }
}

// A blocking send whose receive completes only together with a later
// message's (one MPI_Waitall): the send must return before its data is
// taken.
void blocking_send_before_waitall(long count) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Send, then MPI_Waitall of its receive with a later one", "MPI_DOUBLE", "", count, "device"};
  if (g_rank < g_partner) {
    Buffer first = make_buffer(values_of(g_rank, id, count), Memory::device);
    Buffer second = make_buffer(values_of(g_rank, id + 1, 7), Memory::host);
    check_mpi(MPI_Send(first.data(), count, MPI_DOUBLE, g_partner, 60, MPI_COMM_WORLD), what);
    check_mpi(MPI_Send(second.data(), 7, MPI_DOUBLE, g_partner, 61, MPI_COMM_WORLD), what);
  } else {
    Buffer first = make_buffer(poisoned<double>(count), Memory::device);
    Buffer second = make_buffer(poisoned<double>(7), Memory::device);
    MPI_Request requests[2];
    check_mpi(MPI_Irecv(first.data(), count, MPI_DOUBLE, g_partner, 60, MPI_COMM_WORLD, &requests[0]), what);
    check_mpi(MPI_Irecv(second.data(), 7, MPI_DOUBLE, g_partner, 61, MPI_COMM_WORLD, &requests[1]), what);
    check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), what);
    expect_buffer(what, first, values_of(g_partner, id, count));
    expect_buffer(what, second, values_of(g_partner, id + 1, 7));
  }
}

// A nonblocking send (handed to the network at once) whose sender then
// blocks in the real MPI alone, on a host message its receiver sends only
// once the send has arrived: the rest of it, far more than the sockets'
// buffers hold, must reach the receive with no Ferry call from the sender.
void sender_blocked_in_host_receive(long count) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Isend, then a host MPI_Recv before its MPI_Wait", "MPI_DOUBLE", "", count, "device"};
  int reply = 0;
  if (g_rank < g_partner) {
    Buffer out = make_buffer(values_of(g_rank, id, count), Memory::device, 8);
    MPI_Request request;
    check_mpi(MPI_Isend(out.data(), count, MPI_DOUBLE, g_partner, 70, MPI_COMM_WORLD, &request), what);
    check_mpi(MPI_Recv(&reply, 1, MPI_INT, g_partner, 71, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
    check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
    expect(reply == 1, what, "reply " + std::to_string(reply));
  } else {
    Buffer in = make_buffer(poisoned<double>(count), Memory::device);
    check_mpi(MPI_Recv(in.data(), count, MPI_DOUBLE, g_partner, 70, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
    expect_buffer(what, in, values_of(g_partner, id, count));
    reply = 1;
    check_mpi(MPI_Send(&reply, 1, MPI_INT, g_partner, 71, MPI_COMM_WORLD), what);
  }
}

// Wildcards, probes and a matched probe: the lower rank of each pair sends
// three messages, the higher one takes them three ways.
void probes_and_wildcards(long count) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Probe/MPI_Mprobe/MPI_ANY_SOURCE", "MPI_INT32_T", "", count, "device"};
  if (g_rank < g_partner) {
    for (int k = 0; k < 3; ++k) {
      Buffer out = make_buffer(random_values<int32_t>(count + k, id + k, g_rank), Memory::device);
      check_mpi(MPI_Send(out.data(), count + k, MPI_INT32_T, g_partner, 20 + k, MPI_COMM_WORLD), what);
    }
    return;
  }
  MPI_Status status;
  int got = -1;
  // Probe, then a host receive of the count it gave.
  check_mpi(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status), what);
  MPI_Get_count(&status, MPI_INT32_T, &got);
  expect(got == count && status.MPI_SOURCE == g_partner && status.MPI_TAG == 20, what,
         "probe: count " + std::to_string(got) + " tag " + std::to_string(status.MPI_TAG));
  Buffer host = make_buffer(poisoned<int32_t>(count), Memory::host);
  check_mpi(MPI_Recv(host.data(), count, MPI_INT32_T, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD, &status),
            what);
  expect_buffer(what, host, random_values<int32_t>(count, id, g_partner));
  // A matched probe and MPI_Mrecv into device memory.
  MPI_Message message;
  check_mpi(MPI_Mprobe(g_partner, 21, MPI_COMM_WORLD, &message, &status), what);
  MPI_Get_count(&status, MPI_INT32_T, &got);
  expect(got == count + 1, what, "mprobe: count " + std::to_string(got));
  Buffer device = make_buffer(poisoned<int32_t>(count + 1), Memory::device, 4);
  check_mpi(MPI_Mrecv(device.data(), count + 1, MPI_INT32_T, &message, &status), what);
  expect_buffer(what, device, random_values<int32_t>(count + 1, id + 1, g_partner));
  // MPI_ANY_SOURCE and MPI_ANY_TAG into device memory with room to spare.
  Buffer spare = make_buffer(poisoned<int32_t>(count + 5), Memory::device);
  check_mpi(MPI_Recv(spare.data(), count + 5, MPI_INT32_T, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status),
            what);
  MPI_Get_count(&status, MPI_INT32_T, &got);
  expect(got == count + 2 && status.MPI_TAG == 22, what, "wildcard receive: count " + std::to_string(got));
  std::vector<int32_t> expected = random_values<int32_t>(count + 2, id + 2, g_partner);
  expected.resize(count + 5, poisoned<int32_t>(1)[0]);
  expect_buffer(what, spare, expected);
}

// A strided receive (every other double) and a receive too short for its
// message (MPI_ERR_TRUNCATE, and the next message still arrives whole).
void strided_and_short(long count) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Recv strided / truncated", "MPI_DOUBLE", "", count, "device"};
  MPI_Datatype every_other;
  MPI_Type_vector(static_cast<int>(count), 1, 2, MPI_DOUBLE, &every_other);
  MPI_Type_commit(&every_other);
  if (g_rank < g_partner) {
    Buffer out = make_buffer(values_of(g_rank, id, count), Memory::device);
    check_mpi(MPI_Send(out.data(), count, MPI_DOUBLE, g_partner, 30, MPI_COMM_WORLD), what);
    check_mpi(MPI_Send(out.data(), count, MPI_DOUBLE, g_partner, 31, MPI_COMM_WORLD), what);
    check_mpi(MPI_Send(out.data(), count, MPI_DOUBLE, g_partner, 32, MPI_COMM_WORLD), what);
  } else {
    std::vector<double> image = poisoned<double>(2 * count);
    Buffer strided = make_buffer(image, Memory::device);
    check_mpi(MPI_Recv(strided.data(), 1, every_other, g_partner, 30, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
    const std::vector<double> sent = values_of(g_partner, id, count);
    for (long i = 0; i < count; ++i) image[2 * i] = sent[i];
    expect_buffer(what, strided, image);
    Buffer short_buffer = make_buffer(poisoned<double>(count), Memory::device);
    MPI_Status status;
    const int rc = MPI_Recv(short_buffer.data(), count - 1, MPI_DOUBLE, g_partner, 31, MPI_COMM_WORLD, &status);
    int error_class = MPI_SUCCESS;
    MPI_Error_class(rc, &error_class);
    expect(error_class == MPI_ERR_TRUNCATE, what, "a short receive returned class " + std::to_string(error_class));
    Buffer whole = make_buffer(poisoned<double>(count), Memory::device);
    check_mpi(MPI_Recv(whole.data(), count, MPI_DOUBLE, g_partner, 32, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
    expect_buffer(what, whole, sent);
  }
  MPI_Type_free(&every_other);
}

void persistent_and_freed(long count) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Send_init/MPI_Recv_init, MPI_Request_free", "MPI_FLOAT", "", count, "device"};
  Buffer out(count * sizeof(float), Memory::device, 4);
  Buffer in(count * sizeof(float), Memory::device);
  MPI_Request requests[2];
  check_mpi(MPI_Send_init(out.data(), count, MPI_FLOAT, g_partner, 40, MPI_COMM_WORLD, &requests[0]), what);
  check_mpi(MPI_Recv_init(in.data(), count, MPI_FLOAT, g_partner, 40, MPI_COMM_WORLD, &requests[1]), what);
  for (int round = 0; round < 3; ++round) {
    const std::vector<float> mine = random_values<float>(count, id + round, g_rank);
    out.write(mine.data(), mine.size() * sizeof(float));
    check_mpi(MPI_Startall(2, requests), what);
    check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), what);
    expect_buffer(what, in, random_values<float>(count, id + round, g_partner));
  }
  MPI_Request_free(&requests[0]);
  MPI_Request_free(&requests[1]);
  // A nonblocking send whose request is freed at once still arrives.
  Buffer freed = make_buffer(random_values<float>(count, id + 7, g_rank), Memory::device);
  MPI_Request request;
  check_mpi(MPI_Isend(freed.data(), count, MPI_FLOAT, g_partner, 41, MPI_COMM_WORLD, &request), what);
  check_mpi(MPI_Request_free(&request), what);
  Buffer arrived = make_buffer(poisoned<float>(count), Memory::device);
  check_mpi(MPI_Recv(arrived.data(), count, MPI_FLOAT, g_partner, 41, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
  expect_buffer(what, arrived, random_values<float>(count, id + 7, g_partner));
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
}

// Ranks of one parity: every pair still spans the nodes.
void on_half_communicator(long count) {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Sendrecv", "MPI_INT64_T", "", count, "device", "communicator of half the ranks"};
  MPI_Comm half;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half), what);
  int rank = 0, size = 0;
  MPI_Comm_rank(half, &rank);
  MPI_Comm_size(half, &size);
  const int partner = (rank + size / 2) % size;
  Buffer out = make_buffer(random_values<int64_t>(count, id, g_rank), Memory::device);
  Buffer in = make_buffer(poisoned<int64_t>(count), Memory::device);
  MPI_Request requests[2];
  check_mpi(MPI_Irecv(in.data(), count, MPI_INT64_T, partner, 50, half, &requests[0]), what);
  check_mpi(MPI_Isend(out.data(), count, MPI_INT64_T, partner, 50, half, &requests[1]), what);
  check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), what);
  int partner_world = 0;
  MPI_Group group, world_group;
  MPI_Comm_group(half, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_translate_ranks(group, 1, &partner, world_group, &partner_world);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  expect_buffer(what, in, random_values<int64_t>(count, id, partner_world));
  MPI_Comm_free(&half);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  g_rank = world_rank();
  g_size = world_size();
  // The partner on the other node (two nodes of size / 2 ranks).
  g_partner = (g_rank + g_size / 2) % g_size;
  // Around FERRY_NET_MIN_BYTES (262144 bytes by default: under it staged)
  // and several chunks with an odd tail.
  for (long doubles : {32767L, 32768L, 400003L}) {
    exchange_nonblocking(doubles, Memory::device, 0);
    exchange_nonblocking(doubles, Memory::host, 8);
    sendrecv_both_ways(doubles);
    persistent_and_freed(doubles);
    on_half_communicator(doubles);
  }
  for (int mode = 0; mode < 3; ++mode) blocking_both_ways(1000001, mode);
  blocking_send_before_waitall(400003);
  sender_blocked_in_host_receive(4000037);
  probes_and_wildcards(100003);
  strided_and_short(65537);
  return finish();
}
