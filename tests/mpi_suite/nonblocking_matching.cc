// Nonblocking point-to-point on device buffers, the second half of the
// program (nonblocking.cc): wildcard receives and the order they match in,
// many requests outstanding at once in one array (staged and unstaged
// mixed), MPI_Cancel of a receive, MPI_Request_free of a send, and
// MPI_PROC_NULL as both peers.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "completion.h"
#include "nonblocking.h"
#include "point_to_point_common.h"
#include "suite.h"

namespace {

using namespace suite;

// ---- Wildcards and order ---------------------------------------------------

// Every rank but one sends two messages with one tag to it; the receiver posts
// wildcard receives. Each sender's messages must land in its receives in the
// order the receives were posted. All ranks take part, and the barrier at the
// end keeps later cases' messages away from the wildcards.
template <class T>
void test_wildcards(const Datatype& type, long count, Layout layout, Match match) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int ranks = world_size();
  const int receiver = pair_for(id).dest;
  const int tag = int(id % kTagSpan);
  const Completion recv_how = completion_with_status(int(id));
  const Completion send_how = completion(int(id + 3));
  const Case what{"MPI_Isend+MPI_Irecv",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "receiver=" + std::to_string(receiver) + " match=" + match_name(match) +
                      " two messages per sender" + completions_detail(recv_how, send_how)};
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  // Sender s's two messages: count elements, then count + 2.
  const long lengths[2] = {count, count + 2};
  auto message = [&](int sender, int sequence) {
    const std::vector<T> both = random_values<T>(lengths[0] + lengths[1], id, sender);
    const auto first = both.begin() + (sequence == 0 ? 0 : lengths[0]);
    return std::vector<T>(first, first + lengths[sequence]);
  };

  if (rank != receiver) {
    std::vector<Buffer> sends;
    std::vector<std::vector<T>> sent;
    std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
    for (int sequence = 0; sequence < 2; ++sequence) {
      sent.push_back(message(rank, sequence));
      sends.push_back(make_buffer(sent.back(), send_memory(layout, rank), offset));
      check_mpi(MPI_Isend(sends.back().data(), int(lengths[sequence]), type.handle, receiver, tag,
                          MPI_COMM_WORLD, &requests[sequence]),
                what);
    }
    complete(send_how, requests, what);
    for (int sequence = 0; sequence < 2; ++sequence)
      expect_buffer(send_side(what), sends[sequence], sent[sequence]);
  } else {
    const int capacity = int(lengths[1] + kSlack);
    const int receives = 2 * (ranks - 1);
    std::vector<Buffer> buffers;
    std::vector<int> posted_source;
    std::vector<MPI_Request> requests(receives, MPI_REQUEST_NULL);
    for (int j = 0; j < receives; ++j) {
      // MPI_ANY_TAG names its source: the first round of receives is for the
      // first message of every sender, the second for the second.
      int source = MPI_ANY_SOURCE;
      if (match == Match::any_tag) {
        source = j % (ranks - 1);
        if (source >= receiver) ++source;
      }
      posted_source.push_back(source);
      buffers.push_back(make_buffer(poisoned<T>(capacity), recv_memory(layout, rank), offset));
      check_mpi(MPI_Irecv(buffers.back().data(), capacity, type.handle, source,
                          match == Match::any_source ? tag : MPI_ANY_TAG, MPI_COMM_WORLD,
                          &requests[j]),
                what);
    }
    const std::vector<MPI_Status> statuses = *complete(recv_how, requests, what);
    std::vector<int> arrived(ranks, 0);
    for (int j = 0; j < receives; ++j) {
      Case receive_case = what;
      receive_case.detail += " receive=" + std::to_string(j);
      const int source = statuses[j].MPI_SOURCE;
      if (source < 0 || source >= ranks || source == receiver ||
          (posted_source[j] != MPI_ANY_SOURCE && source != posted_source[j]) ||
          arrived[source] >= 2) {
        fail(receive_case, "status.MPI_SOURCE " + std::to_string(source) +
                               " is not a sender with a message left for this receive");
        continue;
      }
      // The earlier of a sender's two receives must hold its first message.
      const int sequence = arrived[source]++;
      receive_case.detail += " from=" + std::to_string(source) + " message=" +
                             std::to_string(sequence);
      expect_buffer(receive_case, buffers[j], with_slack(message(source, sequence),
                                                         capacity - lengths[sequence]));
      expect_status(receive_case, statuses[j], type.handle, int(lengths[sequence]), source, tag);
    }
  }
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
}

// ---- Many requests at once -----------------------------------------------------

// Every rank sends `messages` messages, all with one tag, to the rank `shift`
// above it and receives as many from the rank `shift` below, with every
// request outstanding at once in one array (receives and sends interleaved)
// completed by `how`. Message i is device or host memory on each side as
// `memory` says. The receives must be matched in the order they were posted.
template <class T>
void test_many(const Datatype& type, int messages, Completion how, const std::string& memory_name,
               Memory (*memory)(int message, bool receive)) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int ranks = world_size();
  const int shift = 1 + int(id % uint64_t(ranks - 1));
  const int dest = (rank + shift) % ranks;
  const int source = (rank - shift + ranks) % ranks;
  const int tag = int(id % kTagSpan);
  auto length = [](int message) { return long(message) * 37 % 301; };  // 0 .. 300, mixed
  long total = 0;
  for (int i = 0; i < messages; ++i) total += length(i);
  const Case what{"MPI_Isend+MPI_Irecv",
                  type.name,
                  "",
                  total,
                  memory_name,
                  std::to_string(messages) + " messages each way, shift=" + std::to_string(shift) +
                      " completion=" + completion_name(how)};
  const std::vector<T> outgoing = random_values<T>(total, id, rank);
  const std::vector<T> incoming = random_values<T>(total, id, source);
  std::vector<Buffer> sends;
  std::vector<Buffer> recvs;
  std::vector<MPI_Request> requests(2 * messages, MPI_REQUEST_NULL);
  long first = 0;
  for (int i = 0; i < messages; ++i) {
    const int capacity = int(length(i) + kSlack);
    recvs.push_back(make_buffer(poisoned<T>(capacity), memory(i, true), sizeof(T) * (i % 2)));
    check_mpi(MPI_Irecv(recvs.back().data(), capacity, type.handle, source, tag, MPI_COMM_WORLD,
                        &requests[2 * i]),
              what);
    const std::vector<T> part(outgoing.begin() + first, outgoing.begin() + first + length(i));
    sends.push_back(make_buffer(part, memory(i, false)));
    check_mpi(MPI_Isend(sends.back().data(), int(length(i)), type.handle, dest, tag,
                        MPI_COMM_WORLD, &requests[2 * i + 1]),
              what);
    first += length(i);
  }
  const std::optional<std::vector<MPI_Status>> statuses = complete(how, requests, what);
  first = 0;
  for (int i = 0; i < messages; ++i) {
    Case message_case = what;
    message_case.detail += " message=" + std::to_string(i);
    const std::vector<T> in(incoming.begin() + first, incoming.begin() + first + length(i));
    const std::vector<T> out(outgoing.begin() + first, outgoing.begin() + first + length(i));
    expect_buffer(message_case, recvs[i], with_slack(in));
    expect_buffer(send_side(message_case), sends[i], out);
    if (statuses) {
      expect_status(message_case, (*statuses)[2 * i], type.handle, int(length(i)), source, tag);
    }
    first += length(i);
  }
}

Memory all_device(int, bool) { return Memory::device; }
// Staged and unstaged requests in one array, and on both sides of a message.
Memory alternating(int message, bool receive) {
  return (receive ? message % 3 != 0 : message % 2 == 0) ? Memory::device : Memory::host;
}

// ---- Cancel, free, MPI_PROC_NULL ------------------------------------------------

// A receive that nothing will match, cancelled. Open MPI cancels posted
// receives; if the MPI cannot, a message to self completes the receive and
// the data must then be there. A cancelled receive leaves its buffer as it was.
template <class T>
void test_cancel(const Datatype& type, long count, Layout layout, Completion how) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{"MPI_Irecv+MPI_Cancel",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=self completion=" + completion_name(how)};
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  const Buffer recv = make_buffer(poisoned<T>(count), recv_memory(layout, rank), offset);
  std::vector<MPI_Request> requests(3, MPI_REQUEST_NULL);
  const int position = int(id % 3);
  check_mpi(MPI_Irecv(recv.data(), int(count), type.handle, rank, kCancelTag, MPI_COMM_WORLD,
                      &requests[position]),
            what);
  check_mpi(MPI_Cancel(&requests[position]), what);
  const bool done = cancel_completes(requests[position], what);
  const std::vector<T> data = random_values<T>(count, id, rank);
  if (!done) {
    check_mpi(MPI_Send(data.data(), int(count), type.handle, rank, kCancelTag, MPI_COMM_WORLD),
              what);
  }
  const MPI_Status status = (*complete(how, requests, what))[position];
  expect_cancel_outcome(what, status, done, recv, data);
}

// MPI_Request_free on a device Isend right after posting it, then a second
// Isend of other data from another buffer: the freed send must still deliver
// its own data. The barrier tells the sender both messages arrived, so only
// after it may the buffers go.
template <class T>
void test_request_free(const Datatype& type, long count, Layout layout) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const Completion recv_how = completion_with_status(int(id));
  const Completion send_how = completion(int(id + 5));
  const Case what{"MPI_Isend+MPI_Request_free",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=" + std::to_string(pair.source) + " dest=" + std::to_string(pair.dest) +
                      completions_detail(recv_how, send_how)};
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  const std::vector<T> both = random_values<T>(2 * count, id, pair.source);
  const std::vector<T> first(both.begin(), both.begin() + count);
  const std::vector<T> second(both.begin() + count, both.end());
  std::vector<Buffer> buffers;
  if (rank == pair.source) {
    buffers.push_back(make_buffer(first, send_memory(layout, rank), offset));
    buffers.push_back(make_buffer(second, send_memory(layout, rank), offset));
    MPI_Request freed = MPI_REQUEST_NULL;
    check_mpi(MPI_Isend(buffers[0].data(), int(count), type.handle, pair.dest, tag,
                        MPI_COMM_WORLD, &freed),
              what);
    check_mpi(MPI_Request_free(&freed), what);
    expect(freed == MPI_REQUEST_NULL, what, "MPI_Request_free left the handle set");
    std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
    check_mpi(MPI_Isend(buffers[1].data(), int(count), type.handle, pair.dest, tag,
                        MPI_COMM_WORLD, &requests[0]),
              what);
    complete(send_how, requests, what);
  } else if (rank == pair.dest) {
    std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
    for (int k = 0; k < 2; ++k) {
      buffers.push_back(make_buffer(poisoned<T>(count + kSlack), recv_memory(layout, rank), offset));
      check_mpi(MPI_Irecv(buffers[k].data(), int(count + kSlack), type.handle, pair.source, tag,
                          MPI_COMM_WORLD, &requests[k]),
                what);
    }
    const std::vector<MPI_Status> statuses = *complete(recv_how, requests, what);
    for (int k = 0; k < 2; ++k) {
      Case message_case = what;
      message_case.detail += k == 0 ? " message=freed" : " message=second";
      expect_buffer(message_case, buffers[k], with_slack(k == 0 ? first : second));
      expect_status(message_case, statuses[k], type.handle, int(count), pair.source, tag);
    }
  }
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
  if (rank == pair.source) {
    expect_buffer(send_side(what), buffers[0], first);
    expect_buffer(send_side(what), buffers[1], second);
  }
}

// MPI_PROC_NULL as both peers: the requests complete at once, nothing moves,
// and the receive's status says so.
template <class T>
void test_proc_null(const Datatype& type, Layout layout, Completion how) {
  const uint64_t id = next_case_id();
  const long count = 7;
  const Case what{"MPI_Isend+MPI_Irecv",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "peers=MPI_PROC_NULL completion=" + completion_name(how)};
  const std::vector<T> outgoing = random_values<T>(count, id, world_rank());
  const std::vector<T> untouched = poisoned<T>(count);
  const Operands operands =
      place(layout, id, world_rank(), /*in_place=*/false, &outgoing, &untouched);
  std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
  check_mpi(MPI_Irecv(operands.recv_arg(), int(count), type.handle, MPI_PROC_NULL, 0,
                      MPI_COMM_WORLD, &requests[0]),
            what);
  check_mpi(MPI_Isend(operands.send_arg(), int(count), type.handle, MPI_PROC_NULL, 0,
                      MPI_COMM_WORLD, &requests[1]),
            what);
  const std::optional<std::vector<MPI_Status>> statuses = complete(how, requests, what);
  check_operands(what, operands, untouched, &outgoing);
  // MPICH 4.0.2 says source and tag 0 there (MPICH 5: as MPI says).
  if (statuses && !mpich_4())
    expect_status(what, (*statuses)[0], type.handle, 0, MPI_PROC_NULL, MPI_ANY_TAG);
}

}  // namespace

namespace suite {

void test_matching_and_lifetimes() {
  const Datatype int32{MPI_INT, "MPI_INT"};
  const Datatype float64{MPI_DOUBLE, "MPI_DOUBLE"};
  const Datatype uint8{MPI_UINT8_T, "MPI_UINT8_T"};

  for (Match match : {Match::any_source_and_tag, Match::any_source, Match::any_tag}) {
    test_wildcards<int32_t>(int32, 1, Layout::device, match);
    test_wildcards<double>(float64, 1023, Layout::mixed_sides, match);
  }

  for (int number : {0, 1}) {
    test_many<double>(float64, 64, completion(int(Call::waitall) * 2 + number),
                      "device", all_device);
  }
  for (int number = 0; number < kCompletions; ++number) {
    test_many<int32_t>(int32, 16, completion(number), "alternating_device_host", alternating);
  }

  for (int number = 0; number < kCalls; ++number) {
    test_cancel<double>(float64, 7, kP2pLayouts[number % kP2pLayouts.size()],
                        completion_with_status(number));
    test_cancel<uint8_t>(uint8, 1023, kP2pLayouts[(number + 1) % kP2pLayouts.size()],
                         completion_with_status(number + 3));
  }

  for (Layout layout : kP2pLayouts) {
    test_request_free<double>(float64, 7, layout);
    test_request_free<double>(float64, kLarge, layout);
  }

  for (int number = 0; number < int(kP2pLayouts.size()); ++number) {
    test_proc_null<int32_t>(int32, kP2pLayouts[number], completion(3 * number));
  }
}

}  // namespace suite
