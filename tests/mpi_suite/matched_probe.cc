// Matched probes into device buffers: MPI_Mprobe + MPI_Mrecv and
// MPI_Improbe + MPI_Imrecv, with exact and wildcard source and tag, every
// completion call for MPI_Imrecv, two messages of one tag received in the
// reverse of their probe order (each handle must receive its own message),
// and MPI_MESSAGE_NO_PROC from a probe of MPI_PROC_NULL. The data, the room
// past it and every status (counts in the receive's datatype) are checked.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "completion.h"
#include "point_to_point_common.h"
#include "suite.h"

namespace {

using namespace suite;

enum class Probe { blocking, nonblocking };

// Probes for (source_arg, tag_arg) until a message is there; MPI_Improbe in
// a loop, bounded by a Deadline.
MPI_Message probe(Probe kind, int source_arg, int tag_arg, const Case& what, MPI_Status* status) {
  MPI_Message message = MPI_MESSAGE_NULL;
  if (kind == Probe::blocking) {
    check_mpi(MPI_Mprobe(source_arg, tag_arg, MPI_COMM_WORLD, &message, status), what);
    return message;
  }
  const Deadline deadline(what, "MPI_Improbe");
  for (int flag = 0; !flag; deadline.check()) {
    check_mpi(MPI_Improbe(source_arg, tag_arg, MPI_COMM_WORLD, &flag, &message, status), what);
  }
  return message;
}

// Receives a probed message into buffer: MPI_Mrecv after MPI_Mprobe,
// MPI_Imrecv completed by `how` after MPI_Improbe. Returns the status, if any.
std::optional<MPI_Status> receive(Probe kind, const Buffer& buffer, int capacity, MPI_Datatype type,
                                  MPI_Message* message, Completion how, const Case& what) {
  if (kind == Probe::blocking) {
    MPI_Status status;
    check_mpi(MPI_Mrecv(buffer.data(), capacity, type, message, &status), what);
    return status;
  }
  std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
  check_mpi(MPI_Imrecv(buffer.data(), capacity, type, message, &requests[1]), what);
  const std::optional<std::vector<MPI_Status>> statuses = complete(how, requests, what);
  if (!statuses) return std::nullopt;
  return (*statuses)[1];
}

// Two messages from a pair's source, same tag; the dest probes both, then
// receives the second one first. Each must land where its own handle says.
template <class T>
void test_pair(const Datatype& type, long count, Layout layout, Probe kind) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const Match match = Match(id % 4);
  const Completion how = completion(int(id));
  const Case what{kind == Probe::blocking ? "MPI_Mprobe+MPI_Mrecv" : "MPI_Improbe+MPI_Imrecv",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=" + std::to_string(pair.source) + " dest=" + std::to_string(pair.dest) +
                      " match=" + match_name(match) +
                      (kind == Probe::nonblocking ? " completion=" + completion_name(how) : "")};
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  // The second message is shorter, so a mix-up shows in the counts too.
  const long lengths[2] = {count, count / 2};
  auto message = [&](int k) { return random_values<T>(lengths[k], id, pair.source + world_size() * k); };
  if (rank == pair.source) {
    std::vector<Buffer> sends;
    std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
    for (int k = 0; k < 2; ++k) {
      sends.push_back(make_buffer(message(k), send_memory(layout, rank), offset));
      check_mpi(MPI_Isend(sends[k].data(), int(lengths[k]), type.handle, pair.dest, tag,
                          MPI_COMM_WORLD, &requests[k]),
                what);
    }
    check_mpi(MPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE), what);
  } else if (rank == pair.dest) {
    const bool any_source = match == Match::any_source || match == Match::any_source_and_tag;
    const bool any_tag = match == Match::any_tag || match == Match::any_source_and_tag;
    // Other pairs' messages never reach this rank meanwhile: every other rank
    // sits this case out, and the barrier below keeps cases apart.
    const int source_arg = any_source ? MPI_ANY_SOURCE : pair.source;
    const int tag_arg = any_tag ? MPI_ANY_TAG : tag;
    MPI_Message messages[2];
    for (int k = 0; k < 2; ++k) {
      MPI_Status status;
      messages[k] = probe(kind, source_arg, tag_arg, what, &status);
      Case probed = what;
      probed.detail += " (probe " + std::to_string(k) + ")";
      expect_status(probed, status, type.handle, int(lengths[k]), pair.source, tag);
    }
    const int capacity = int(count + kSlack);
    std::vector<Buffer> recvs;
    for (int k = 0; k < 2; ++k) {
      recvs.push_back(make_buffer(poisoned<T>(capacity), recv_memory(layout, rank), offset));
    }
    for (int k : {1, 0}) {
      Case received = what;
      received.detail += " message=" + std::to_string(k);
      const std::optional<MPI_Status> status =
          receive(kind, recvs[k], capacity, type.handle, &messages[k], how, received);
      expect(messages[k] == MPI_MESSAGE_NULL, received, "the receive left the message handle set");
      expect_buffer(received, recvs[k], with_slack(message(k), capacity - lengths[k]));
      if (status) expect_status(received, *status, type.handle, int(lengths[k]), pair.source, tag);
    }
  }
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
}

// A probe of MPI_PROC_NULL returns MPI_MESSAGE_NO_PROC at once; receiving it
// moves nothing and reports MPI_PROC_NULL, MPI_ANY_TAG and a count of 0.
template <class T>
void test_no_proc(const Datatype& type, long count, Layout layout, Probe kind, Completion how) {
  const uint64_t id = next_case_id();
  const Case what{kind == Probe::blocking ? "MPI_Mprobe+MPI_Mrecv" : "MPI_Improbe+MPI_Imrecv",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=MPI_PROC_NULL completion=" + completion_name(how)};
  MPI_Status status;
  MPI_Message message = probe(kind, MPI_PROC_NULL, 0, what, &status);
  expect(message == MPI_MESSAGE_NO_PROC, what, "the probe did not return MPI_MESSAGE_NO_PROC");
  expect_status(what, status, type.handle, 0, MPI_PROC_NULL, MPI_ANY_TAG);
  const Buffer recv = make_buffer(poisoned<T>(count), recv_memory(layout, world_rank()),
                                  offset_bytes(layout, sizeof(T), id));
  const std::optional<MPI_Status> received =
      receive(kind, recv, int(count), type.handle, &message, how, what);
  expect_buffer(what, recv, poisoned<T>(count));
  if (received) expect_status(what, *received, type.handle, 0, MPI_PROC_NULL, MPI_ANY_TAG);
}

template <class T>
void test_type(const Datatype& type) {
  for (long count : kP2pCounts) {
    for (Layout layout : kP2pLayouts) {
      test_pair<T>(type, count, layout, Probe::blocking);
      test_pair<T>(type, count, layout, Probe::nonblocking);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  if (world_size() < 2) {
    std::fprintf(stderr, "matched_probe needs at least 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const Datatype int32{MPI_INT, "MPI_INT"};
  const Datatype float64{MPI_DOUBLE, "MPI_DOUBLE"};
  const Datatype uint8{MPI_UINT8_T, "MPI_UINT8_T"};

  test_type<int32_t>(int32);
  test_type<uint8_t>(uint8);
  for (int number = 0; number < 4; ++number) {
    test_pair<double>(float64, kLarge + 3, kP2pLayouts[number],
                      number % 2 ? Probe::nonblocking : Probe::blocking);
  }
  for (int number = 0; number < kCompletions; ++number) {
    const Layout layout = kP2pLayouts[number % kP2pLayouts.size()];
    test_no_proc<double>(float64, 7, layout, number % 2 ? Probe::nonblocking : Probe::blocking,
                         completion(number));
  }
  return suite::finish();
}
