// Persistent point-to-point on device buffers: MPI_Send_init, MPI_Ssend_init,
// MPI_Bsend_init and MPI_Rsend_init into MPI_Recv_init, started again and
// again with new data in the send buffer (each MPI_Start must send what the
// buffer holds then) and completed by every completion call; MPI_Startall over
// persistent requests mixed with nonpersistent ones, device and host; a
// persistent receive cancelled, then restarted; MPI_Request_free of inactive
// and active requests; MPI_Request_get_status, which leaves the request to
// the completion call but must show the data once it reports completion.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "completion.h"
#include "point_to_point_common.h"
#include "suite.h"

namespace {

using namespace suite;

constexpr int kRounds = 3;

const char* init_call(Mode mode) {
  switch (mode) {
    case Mode::standard:
      return "MPI_Send_init";
    case Mode::synchronous:
      return "MPI_Ssend_init";
    case Mode::buffered:
      return "MPI_Bsend_init";
    case Mode::ready:
      return "MPI_Rsend_init";
  }
  return "?";
}

int send_init(Mode mode, const void* buffer, int count, MPI_Datatype type, int dest, int tag,
              MPI_Comm comm, MPI_Request* request) {
  switch (mode) {
    case Mode::standard:
      return MPI_Send_init(buffer, count, type, dest, tag, comm, request);
    case Mode::synchronous:
      return MPI_Ssend_init(buffer, count, type, dest, tag, comm, request);
    case Mode::buffered:
      return MPI_Bsend_init(buffer, count, type, dest, tag, comm, request);
    case Mode::ready:
      return MPI_Rsend_init(buffer, count, type, dest, tag, comm, request);
  }
  return MPI_ERR_OTHER;
}

Case round_case(Case what, int round) {
  what.detail += " round=" + std::to_string(round);
  return what;
}

// What a sender puts in its buffer for one round: different every round.
template <class T>
std::vector<T> round_data(long count, uint64_t id, int sender, int round) {
  return random_values<T>(count, id, sender + world_size() * round);
}

// One persistent send and one persistent receive between a pair, started
// kRounds times; the sender rewrites its device buffer before each start and
// the receiver re-poisons its own. The request sits in an array of three
// next to MPI_REQUEST_NULL entries, and each round completes it with another
// call. Both requests are freed inactive at the end.
template <class T>
void test_rounds(const Datatype& type, long count, Layout layout, Mode mode) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const Match match = Match(id % 3);
  const int position = int(id / 3 % 3);
  const Case what{std::string(init_call(mode)) + "+MPI_Recv_init",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=" + std::to_string(pair.source) + " dest=" + std::to_string(pair.dest) +
                      " match=" + match_name(match)};
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  const std::vector<bool> persistent = {true, true, true};
  if (rank == pair.source) {
    Buffer send = make_buffer(poisoned<T>(count), send_memory(layout, rank), offset);
    std::vector<MPI_Request> requests(3, MPI_REQUEST_NULL);
    check_mpi(send_init(mode, send.data(), int(count), type.handle, pair.dest, tag, MPI_COMM_WORLD,
                        &requests[position]),
              what);
    const MPI_Request handle = requests[position];
    for (int round = 0; round < kRounds; ++round) {
      const Case this_round = round_case(what, round);
      const std::vector<T> data = round_data<T>(count, id, pair.source, round);
      send.write(data.data(), data.size() * sizeof(T));
      if (mode == Mode::ready) {
        check_mpi(MPI_Recv(nullptr, 0, MPI_BYTE, pair.dest, kTagSpan + tag, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE),
                  this_round);
      }
      check_mpi(MPI_Start(&requests[position]), this_round);
      complete(completion(int(id) + 5 * round + 3), requests, this_round, persistent);
      Case send_case = this_round;
      send_case.detail += " (send buffer)";
      expect_buffer(send_case, send, data);
    }
    check_mpi(MPI_Request_free(&requests[position]), what);
    expect(requests[position] == MPI_REQUEST_NULL && handle != MPI_REQUEST_NULL, what,
           "MPI_Request_free left the handle set");
  } else if (rank == pair.dest) {
    const int source_arg = match == Match::any_source ? MPI_ANY_SOURCE : pair.source;
    const int tag_arg = match == Match::any_tag ? MPI_ANY_TAG : tag;
    const int capacity = int(count + kSlack);
    Buffer recv = make_buffer(poisoned<T>(capacity), recv_memory(layout, rank), offset);
    std::vector<MPI_Request> requests(3, MPI_REQUEST_NULL);
    check_mpi(MPI_Recv_init(recv.data(), capacity, type.handle, source_arg, tag_arg, MPI_COMM_WORLD,
                            &requests[position]),
              what);
    for (int round = 0; round < kRounds; ++round) {
      const Case this_round = round_case(what, round);
      const std::vector<T> untouched = poisoned<T>(capacity);
      recv.write(untouched.data(), untouched.size() * sizeof(T));
      check_mpi(MPI_Start(&requests[position]), this_round);
      if (mode == Mode::ready) {
        check_mpi(MPI_Send(nullptr, 0, MPI_BYTE, pair.source, kTagSpan + tag, MPI_COMM_WORLD),
                  this_round);
      }
      const Completion how = completion_with_status(int(id) + 3 * round);
      const std::vector<MPI_Status> statuses = *complete(how, requests, this_round, persistent);
      expect_buffer(this_round, recv, with_slack(round_data<T>(count, id, pair.source, round)));
      expect_status(this_round, statuses[position], type.handle, int(count), pair.source, tag);
    }
    // Freed inactive: nothing may arrive in the buffer afterwards.
    check_mpi(MPI_Request_free(&requests[position]), what);
    expect(requests[position] == MPI_REQUEST_NULL, what, "MPI_Request_free left the handle set");
  }
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
}

// Every rank sends `messages` messages with one tag to the rank `shift`
// above and receives as many from the rank `shift` below. The even-numbered
// messages go through persistent requests (started by one MPI_Startall), the
// odd ones through MPI_Isend/MPI_Irecv posted after it; device and host
// buffers alternate. All requests complete in one array by `how`, for
// kRounds rounds with new data each. Receives must match in posting order.
template <class T>
void test_startall_mix(const Datatype& type, int messages, Completion how) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int ranks = world_size();
  const int shift = 1 + int(id % uint64_t(ranks - 1));
  const int dest = (rank + shift) % ranks;
  const int source = (rank - shift + ranks) % ranks;
  const int tag = int(id % kTagSpan);
  auto length = [](int message) { return long(message) * 29 % 211; };
  auto memory = [](int message, bool receive) {
    return (receive ? message % 3 != 1 : message % 4 < 2) ? Memory::device : Memory::host;
  };
  // The persistent messages are posted first, in message order, then the others.
  std::vector<int> posting_order;
  for (int i = 0; i < messages; i += 2) posting_order.push_back(i);
  for (int i = 1; i < messages; i += 2) posting_order.push_back(i);
  const Case what{"MPI_Startall+MPI_Isend+MPI_Irecv",
                  type.name,
                  "",
                  messages,
                  "alternating_device_host",
                  "shift=" + std::to_string(shift) + " completion=" + completion_name(how)};
  std::vector<Buffer> sends, recvs;
  for (int i = 0; i < messages; ++i) {
    sends.push_back(make_buffer(poisoned<T>(length(i)), memory(i, false), sizeof(T) * (i % 2)));
    recvs.push_back(make_buffer(poisoned<T>(length(i) + kSlack), memory(i, true)));
  }
  // requests[2k] receives and requests[2k+1] sends the k-th message posted.
  std::vector<MPI_Request> requests(2 * messages, MPI_REQUEST_NULL);
  std::vector<bool> persistent(2 * messages, false);
  std::vector<MPI_Request> persistent_requests;
  for (int k = 0; k < messages; ++k) {
    const int i = posting_order[k];
    if (i % 2 != 0) continue;
    check_mpi(MPI_Recv_init(recvs[i].data(), int(length(i) + kSlack), type.handle, source, tag,
                            MPI_COMM_WORLD, &requests[2 * k]),
              what);
    check_mpi(MPI_Send_init(sends[i].data(), int(length(i)), type.handle, dest, tag,
                            MPI_COMM_WORLD, &requests[2 * k + 1]),
              what);
    persistent[2 * k] = persistent[2 * k + 1] = true;
  }
  for (int round = 0; round < kRounds; ++round) {
    const Case this_round = round_case(what, round);
    auto message = [&](int sender, int i) {
      return round_data<T>(length(i), id * 64 + uint64_t(i), sender, round);
    };
    for (int i = 0; i < messages; ++i) {
      const std::vector<T> data = message(rank, i);
      sends[i].write(data.data(), data.size() * sizeof(T));
      const std::vector<T> untouched = poisoned<T>(length(i) + kSlack);
      recvs[i].write(untouched.data(), untouched.size() * sizeof(T));
    }
    std::vector<MPI_Request> started;
    for (int k = 0; k < 2 * messages; ++k)
      if (persistent[k]) started.push_back(requests[k]);
    check_mpi(MPI_Startall(int(started.size()), started.data()), this_round);
    for (int k = 0; k < messages; ++k) {
      const int i = posting_order[k];
      if (i % 2 == 0) continue;
      check_mpi(MPI_Irecv(recvs[i].data(), int(length(i) + kSlack), type.handle, source, tag,
                          MPI_COMM_WORLD, &requests[2 * k]),
                this_round);
      check_mpi(MPI_Isend(sends[i].data(), int(length(i)), type.handle, dest, tag, MPI_COMM_WORLD,
                          &requests[2 * k + 1]),
                this_round);
    }
    const std::optional<std::vector<MPI_Status>> statuses =
        complete(how, requests, this_round, persistent);
    for (int k = 0; k < messages; ++k) {
      const int i = posting_order[k];
      Case message_case = this_round;
      message_case.detail += " message=" + std::to_string(i);
      expect_buffer(message_case, recvs[i], with_slack(message(source, i)));
      Case send_case = message_case;
      send_case.detail += " (send buffer)";
      expect_buffer(send_case, sends[i], message(rank, i));
      if (statuses) {
        expect_status(message_case, (*statuses)[2 * k], type.handle, int(length(i)), source, tag);
      }
    }
  }
  for (int k = 0; k < 2 * messages; ++k) {
    if (persistent[k]) check_mpi(MPI_Request_free(&requests[k]), what);
  }
}

// A persistent send started and freed at once, while active: the message
// must still go out, with the data the buffer held at MPI_Start. The
// receiver takes it with MPI_Recv; the barrier then releases the buffer.
template <class T>
void test_free_active(const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const Case what{"MPI_Send_init+MPI_Start+MPI_Request_free",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=" + std::to_string(pair.source) + " dest=" + std::to_string(pair.dest)};
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  const std::vector<T> data = random_values<T>(count, id, pair.source);
  std::optional<Buffer> buffer;
  if (rank == pair.source) {
    buffer.emplace(make_buffer(poisoned<T>(count), send_memory(layout, rank), offset));
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Send_init(buffer->data(), int(count), type.handle, pair.dest, tag, MPI_COMM_WORLD,
                            &request),
              what);
    buffer->write(data.data(), data.size() * sizeof(T));
    check_mpi(MPI_Start(&request), what);
    check_mpi(MPI_Request_free(&request), what);
    expect(request == MPI_REQUEST_NULL, what, "MPI_Request_free left the handle set");
    // A persistent request never started, freed.
    check_mpi(MPI_Send_init(buffer->data(), int(count), type.handle, pair.dest, tag, MPI_COMM_WORLD,
                            &request),
              what);
    check_mpi(MPI_Request_free(&request), what);
  } else if (rank == pair.dest) {
    buffer.emplace(make_buffer(poisoned<T>(count + kSlack), recv_memory(layout, rank), offset));
    MPI_Status status;
    check_mpi(MPI_Recv(buffer->data(), int(count + kSlack), type.handle, pair.source, tag,
                       MPI_COMM_WORLD, &status),
              what);
    expect_buffer(what, *buffer, with_slack(data));
    expect_status(what, status, type.handle, int(count), pair.source, tag);
  }
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
}

// A persistent receive that nothing matches, started and cancelled: it
// completes cancelled and leaves the buffer as it was. Started again, it
// receives a message this rank sends itself.
template <class T>
void test_cancel_then_restart(const Datatype& type, long count, Layout layout, Completion how) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{"MPI_Recv_init+MPI_Cancel+MPI_Start",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=self completion=" + completion_name(how)};
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  const Buffer recv = make_buffer(poisoned<T>(count), recv_memory(layout, rank), offset);
  std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
  const std::vector<bool> persistent = {true, false};
  check_mpi(MPI_Recv_init(recv.data(), int(count), type.handle, rank, kCancelTag, MPI_COMM_WORLD,
                          &requests[0]),
            what);
  check_mpi(MPI_Start(&requests[0]), what);
  check_mpi(MPI_Cancel(&requests[0]), what);
  const bool done = cancel_completes(requests[0], what);
  const std::vector<T> first = random_values<T>(count, id, rank);
  if (!done) {
    check_mpi(MPI_Isend(first.data(), int(count), type.handle, rank, kCancelTag, MPI_COMM_WORLD,
                        &requests[1]),
              what);
  }
  const MPI_Status status = (*complete(how, requests, what, persistent))[0];
  expect_cancel_outcome(what, status, done, recv, first);
  Case again = what;
  again.detail += " (restarted)";
  const std::vector<T> second = random_values<T>(count, id, rank + world_size());
  check_mpi(MPI_Start(&requests[0]), again);
  check_mpi(MPI_Isend(second.data(), int(count), type.handle, rank, kCancelTag, MPI_COMM_WORLD,
                      &requests[1]),
            again);
  const MPI_Status restarted = (*complete(how, requests, again, persistent))[0];
  expect_buffer(again, recv, second);
  expect_status(again, restarted, type.handle, int(count), rank, kCancelTag);
  check_mpi(MPI_Request_free(&requests[0]), what);
}

// MPI_Request_get_status polled until it reports a receive complete: the
// data must be in the receive buffer then, before the Wait that frees the
// request. The program then writes its own values into the buffer; the Wait
// of a request already complete writes nothing (as in the real MPI), so they
// must survive it. A persistent receive does this twice.
template <class T>
void test_get_status(const Datatype& type, long count, Layout layout, bool persistent_recv) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const Case what{persistent_recv ? "MPI_Recv_init+MPI_Request_get_status"
                                  : "MPI_Irecv+MPI_Request_get_status",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=" + std::to_string(pair.source) + " dest=" + std::to_string(pair.dest)};
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  const int rounds = persistent_recv ? 2 : 1;
  if (rank == pair.source) {
    Buffer send = make_buffer(poisoned<T>(count), send_memory(layout, rank), offset);
    for (int round = 0; round < rounds; ++round) {
      const std::vector<T> data = round_data<T>(count, id, rank, round);
      send.write(data.data(), data.size() * sizeof(T));
      MPI_Request request;
      check_mpi(MPI_Isend(send.data(), int(count), type.handle, pair.dest, tag, MPI_COMM_WORLD,
                          &request),
                what);
      // get_status on a staged send, then the Wait that frees it.
      const Deadline deadline(what, "MPI_Request_get_status");
      for (int flag = 0; !flag; deadline.check()) {
        check_mpi(MPI_Request_get_status(request, &flag, MPI_STATUS_IGNORE), what);
      }
      check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
    }
  } else if (rank == pair.dest) {
    const int capacity = int(count + kSlack);
    Buffer recv = make_buffer(poisoned<T>(capacity), recv_memory(layout, rank), offset);
    MPI_Request request = MPI_REQUEST_NULL;
    if (persistent_recv) {
      check_mpi(MPI_Recv_init(recv.data(), capacity, type.handle, pair.source, tag, MPI_COMM_WORLD,
                              &request),
                what);
    }
    for (int round = 0; round < rounds; ++round) {
      const Case this_round = round_case(what, round);
      const std::vector<T> untouched = poisoned<T>(capacity);
      recv.write(untouched.data(), untouched.size() * sizeof(T));
      if (persistent_recv) {
        check_mpi(MPI_Start(&request), this_round);
      } else {
        check_mpi(MPI_Irecv(recv.data(), capacity, type.handle, pair.source, tag, MPI_COMM_WORLD,
                            &request),
                  this_round);
      }
      const Deadline deadline(this_round, "MPI_Request_get_status");
      MPI_Status status;
      for (int flag = 0; !flag; deadline.check()) {
        check_mpi(MPI_Request_get_status(request, &flag, &status), this_round);
      }
      expect(request != MPI_REQUEST_NULL, this_round, "MPI_Request_get_status freed the request");
      expect_status(this_round, status, type.handle, int(count), pair.source, tag);
      expect_buffer(this_round, recv,
                    with_slack(round_data<T>(count, id, pair.source, round)));
      const std::vector<T> own = random_values<T>(capacity, id + 1000, rank + round);
      recv.write(own.data(), own.size() * sizeof(T));
      check_mpi(MPI_Wait(&request, &status), this_round);
      expect_status(this_round, status, type.handle, int(count), pair.source, tag);
      Case after_wait = this_round;
      after_wait.detail += " (after MPI_Wait)";
      expect_buffer(after_wait, recv, own);
    }
    if (persistent_recv) check_mpi(MPI_Request_free(&request), what);
  }
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
}

template <class T>
void test_type(const Datatype& type) {
  for (long count : kP2pCounts) {
    for (Layout layout : kP2pLayouts) {
      for (Mode mode : {Mode::standard, Mode::synchronous, Mode::buffered, Mode::ready}) {
        test_rounds<T>(type, count, layout, mode);
      }
    }
  }
}

// Room for the MPI_Bsend_init messages a rank may have in flight: a
// buffered message leaves the attached buffer only once it is transmitted,
// which may be after the next round started; at most 1023 complex doubles,
// or a large message of doubles.
constexpr int kBsendSpace = kRounds * (int(kLarge) * 8 + MPI_BSEND_OVERHEAD) +
                            64 * (1023 * 16 + MPI_BSEND_OVERHEAD);

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  if (world_size() < 2) {
    std::fprintf(stderr, "persistent needs at least 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::vector<char> bsend_space(kBsendSpace);
  MPI_Buffer_attach(bsend_space.data(), kBsendSpace);

  const Datatype int32{MPI_INT, "MPI_INT"};
  const Datatype float64{MPI_DOUBLE, "MPI_DOUBLE"};
  const Datatype uint8{MPI_UINT8_T, "MPI_UINT8_T"};
  const Datatype complex128{MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX"};

  test_type<int32_t>(int32);
  test_type<uint8_t>(uint8);
  test_type<std::complex<double>>(complex128);
  for (Layout layout : kP2pLayouts) test_rounds<double>(float64, kLarge, layout, Mode::standard);
  test_rounds<double>(float64, kLarge, Layout::offset, Mode::buffered);

  for (int number = 0; number < kCompletions; ++number) {
    test_startall_mix<int32_t>(int32, 12, completion(number));
  }
  test_startall_mix<double>(float64, 40, completion(int(Call::waitall) * 2));

  for (Layout layout : kP2pLayouts) {
    test_free_active<double>(float64, 7, layout);
    test_free_active<double>(float64, kLarge, layout);
  }
  for (int number = 0; number < kCalls; ++number) {
    test_cancel_then_restart<double>(float64, 7, kP2pLayouts[number % kP2pLayouts.size()],
                                     completion_with_status(number));
    test_cancel_then_restart<uint8_t>(uint8, 1023, kP2pLayouts[(number + 1) % kP2pLayouts.size()],
                                      completion_with_status(number + 3));
  }
  for (Layout layout : kP2pLayouts) {
    for (bool persistent_recv : {false, true}) {
      test_get_status<int32_t>(int32, 7, layout, persistent_recv);
      test_get_status<double>(float64, 1023, layout, persistent_recv);
    }
  }

  void* detached = nullptr;
  int detached_size = 0;
  MPI_Buffer_detach(&detached, &detached_size);
  return suite::finish();
}
