// Nonblocking point-to-point on device buffers: MPI_Isend, MPI_Issend,
// MPI_Ibsend and MPI_Irsend into MPI_Irecv, finished by every completion call
// (MPI_Wait, MPI_Test and their all/any/some forms, with statuses and with
// MPI_STATUS(ES)_IGNORE), MPI_Cancel of a receive and MPI_Request_free of a
// send. The received data, the part of the receive buffer the message did not
// reach (the slack past it, the holes of a derived type), the send buffer
// after completion and every status the calls return are checked.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "completion.h"
#include "point_to_point_common.h"
#include "suite.h"

namespace {

using namespace suite;

// ---- Sending and receiving ---------------------------------------------------

const char* send_call(Mode mode) {
  switch (mode) {
    case Mode::standard:
      return "MPI_Isend";
    case Mode::synchronous:
      return "MPI_Issend";
    case Mode::buffered:
      return "MPI_Ibsend";
    case Mode::ready:
      return "MPI_Irsend";
  }
  return "?";
}

int isend_in_mode(Mode mode, const void* buffer, int count, MPI_Datatype type, int dest, int tag,
                  MPI_Request* request) {
  switch (mode) {
    case Mode::standard:
      return MPI_Isend(buffer, count, type, dest, tag, MPI_COMM_WORLD, request);
    case Mode::synchronous:
      return MPI_Issend(buffer, count, type, dest, tag, MPI_COMM_WORLD, request);
    case Mode::buffered:
      return MPI_Ibsend(buffer, count, type, dest, tag, MPI_COMM_WORLD, request);
    case Mode::ready:
      return MPI_Irsend(buffer, count, type, dest, tag, MPI_COMM_WORLD, request);
  }
  return MPI_ERR_OTHER;
}

Case send_side(Case what) {
  what.detail += " (send buffer)";
  return what;
}

// The sender's half of a one-message case: for an Irsend it first waits for
// the receiver's ready signal; the request sits at `position` of an array of
// three with MPI_REQUEST_NULL around it, and `how` completes it.
void send_half(const Case& what, Mode mode, const Buffer& buffer, int count, MPI_Datatype type,
               int dest, int tag, Completion how, int position) {
  if (mode == Mode::ready) {
    check_mpi(MPI_Recv(nullptr, 0, MPI_BYTE, dest, kTagSpan + tag, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
              what);
  }
  std::vector<MPI_Request> requests(3, MPI_REQUEST_NULL);
  check_mpi(isend_in_mode(mode, buffer.data(), count, type, dest, tag, &requests[position]), what);
  complete(how, requests, what);
}

// The receiver's half: posts the MPI_Irecv at `position` of an array of
// three, signals an Irsend's sender that it is ready, completes the request
// with `how` and returns its status, if `how` gives one.
std::optional<MPI_Status> recv_half(const Case& what, Mode mode, const Buffer& buffer,
                                    int capacity, MPI_Datatype type, int source_arg, int tag_arg,
                                    int sender, int tag, Completion how, int position) {
  std::vector<MPI_Request> requests(3, MPI_REQUEST_NULL);
  check_mpi(MPI_Irecv(buffer.data(), capacity, type, source_arg, tag_arg, MPI_COMM_WORLD,
                      &requests[position]),
            what);
  if (mode == Mode::ready) {
    check_mpi(MPI_Send(nullptr, 0, MPI_BYTE, sender, kTagSpan + tag, MPI_COMM_WORLD), what);
  }
  const std::optional<std::vector<MPI_Status>> statuses = complete(how, requests, what);
  if (!statuses) return std::nullopt;
  return (*statuses)[position];
}

// The completions a case's receiver and sender use: every case takes the next
// ones, and the two sides differ.
Completion receiver_completion(uint64_t id) { return completion(int(id + id / 4)); }
Completion sender_completion(uint64_t id) { return completion(int(id + id / 4 + 7)); }

std::string completions_detail(Completion recv, Completion send) {
  return " recv_completion=" + completion_name(recv) + " send_completion=" + completion_name(send);
}

// One message from a pair's source to its dest, received into room for
// `slack` more elements than arrive.
template <class T>
void test_pair(const Datatype& type, long count, Layout layout, Mode mode, long slack = kSlack) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const Match match = Match(id % 3);  // exact, MPI_ANY_SOURCE or MPI_ANY_TAG
  const Completion recv_how = receiver_completion(id);
  const Completion send_how = sender_completion(id);
  const int position = int(id / 3 % 3);
  const Case what{std::string(send_call(mode)) + "+MPI_Irecv",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=" + std::to_string(pair.source) + " dest=" + std::to_string(pair.dest) +
                      " match=" + match_name(match) + " slack=" + std::to_string(slack) +
                      completions_detail(recv_how, send_how)};
  const std::vector<T> data = random_values<T>(count, id, pair.source);
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  if (rank == pair.source) {
    const Buffer send = make_buffer(data, send_memory(layout, rank), offset);
    send_half(what, mode, send, int(count), type.handle, pair.dest, tag, send_how, position);
    expect_buffer(send_side(what), send, data);
  } else if (rank == pair.dest) {
    const int source_arg = match == Match::any_source ? MPI_ANY_SOURCE : pair.source;
    const int tag_arg = match == Match::any_tag ? MPI_ANY_TAG : tag;
    const int capacity = int(count + slack);
    const Buffer recv = make_buffer(poisoned<T>(capacity), recv_memory(layout, rank), offset);
    const std::optional<MPI_Status> status =
        recv_half(what, mode, recv, capacity, type.handle, source_arg, tag_arg, pair.source, tag,
                  recv_how, position);
    expect_buffer(what, recv, with_slack(data, slack));
    if (status) expect_status(what, *status, type.handle, int(count), pair.source, tag);
  }
}

// ---- Derived datatypes -------------------------------------------------------

// A derived datatype over T and where its basic elements lie in the buffer.
struct Shape {
  MPI_Datatype handle;
  std::string name;
  std::vector<long> map;  // element index in the buffer of each basic element of one item, in type-map order
  long extent;            // items lie this many elements apart
};

// Two shapes over `base`: a vector with holes inside and between items, and
// a dense pair whose type map runs backwards (element 1, then element 0).
std::vector<Shape> create_shapes(MPI_Datatype base, size_t element_size) {
  std::vector<Shape> shapes;
  MPI_Datatype strided;
  MPI_Datatype vector;
  MPI_Type_vector(4, 2, 3, base, &strided);
  MPI_Type_create_resized(strided, 0, MPI_Aint(13 * element_size), &vector);
  MPI_Type_free(&strided);
  MPI_Type_commit(&vector);
  shapes.push_back({vector, "vector(4x2, stride 3, extent 13)", {0, 1, 3, 4, 6, 7, 9, 10}, 13});

  MPI_Datatype swapped;
  const int lengths[] = {1, 1};
  const int displacements[] = {1, 0};
  MPI_Type_indexed(2, lengths, displacements, base, &swapped);
  MPI_Type_commit(&swapped);
  shapes.push_back({swapped, "indexed(displacements 1,0)", {1, 0}, 2});
  return shapes;
}

void free_shapes(std::vector<Shape>& shapes) {
  for (Shape& shape : shapes) MPI_Type_free(&shape.handle);
}

// Where basic element i of a message lands in a buffer of items of `shape`.
long landing(const Shape& shape, long i) {
  const long per_item = long(shape.map.size());
  return i / per_item * shape.extent + shape.map[size_t(i % per_item)];
}

// The count, in items of `shape` and in basic elements, a status reports.
void expect_shape_status(const Case& what, const MPI_Status& status, const Shape& shape,
                         long elements, int source, int tag) {
  const long per_item = long(shape.map.size());
  const int items = elements % per_item == 0 ? int(elements / per_item) : MPI_UNDEFINED;
  expect_status(what, status, shape.handle, items, source, tag);
  int got_elements = -1;
  MPI_Get_elements(&status, shape.handle, &got_elements);
  expect(got_elements == elements, what,
         "MPI_Get_elements: expected " + std::to_string(elements) + " got " +
             std::to_string(got_elements));
}

// `elements` contiguous elements from the source, received as `posted` items
// of `shape`: every element lands where the type map puts it, and the holes
// and the items the message did not reach keep their poison.
template <class T>
void test_shape_recv(const Datatype& type, const Shape& shape, long posted, long elements,
                     Layout layout) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const Completion recv_how = completion(int(id));
  const Completion send_how = completion(int(id + 7));
  const int position = int(id % 3);
  const Case what{"MPI_Isend+MPI_Irecv",
                  type.name,
                  "",
                  elements,
                  layout_name(layout),
                  "recv_type=" + shape.name + " recv_count=" + std::to_string(posted) +
                      " source=" + std::to_string(pair.source) + " dest=" +
                      std::to_string(pair.dest) + completions_detail(recv_how, send_how)};
  const std::vector<T> data = random_values<T>(elements, id, pair.source);
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  if (rank == pair.source) {
    const Buffer send = make_buffer(data, send_memory(layout, rank), offset);
    send_half(what, Mode::standard, send, int(elements), type.handle, pair.dest, tag, send_how,
              position);
    expect_buffer(send_side(what), send, data);
  } else if (rank == pair.dest) {
    std::vector<T> expected = poisoned<T>(posted * shape.extent);
    for (long i = 0; i < elements; ++i) expected[landing(shape, i)] = data[i];
    const Buffer recv =
        make_buffer(poisoned<T>(expected.size()), recv_memory(layout, rank), offset);
    const std::optional<MPI_Status> status =
        recv_half(what, Mode::standard, recv, int(posted), shape.handle, pair.source, tag,
                  pair.source, tag, recv_how, position);
    expect_buffer(what, recv, expected);
    if (status) expect_shape_status(what, *status, shape, elements, pair.source, tag);
  }
}

// `items` items of `shape` sent from a buffer whose holes hold other data,
// received contiguously: only the type map's elements travel, in its order.
template <class T>
void test_shape_send(const Datatype& type, const Shape& shape, long items, Layout layout) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const Completion recv_how = completion(int(id));
  const Completion send_how = completion(int(id + 7));
  const int position = int(id % 3);
  const long elements = items * long(shape.map.size());
  const Case what{"MPI_Isend+MPI_Irecv",
                  type.name,
                  "",
                  elements,
                  layout_name(layout),
                  "send_type=" + shape.name + " send_count=" + std::to_string(items) +
                      " source=" + std::to_string(pair.source) + " dest=" +
                      std::to_string(pair.dest) + completions_detail(recv_how, send_how)};
  const std::vector<T> buffer_data = random_values<T>(items * shape.extent, id, pair.source);
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  if (rank == pair.source) {
    const Buffer send = make_buffer(buffer_data, send_memory(layout, rank), offset);
    send_half(what, Mode::standard, send, int(items), shape.handle, pair.dest, tag, send_how,
              position);
    expect_buffer(send_side(what), send, buffer_data);
  } else if (rank == pair.dest) {
    std::vector<T> expected(elements);
    for (long i = 0; i < elements; ++i) expected[i] = buffer_data[landing(shape, i)];
    const int capacity = int(elements + kSlack);
    const Buffer recv = make_buffer(poisoned<T>(capacity), recv_memory(layout, rank), offset);
    const std::optional<MPI_Status> status =
        recv_half(what, Mode::standard, recv, capacity, type.handle, pair.source, tag, pair.source,
                  tag, recv_how, position);
    expect_buffer(what, recv, with_slack(expected));
    if (status) expect_status(what, *status, type.handle, int(elements), pair.source, tag);
  }
}

template <class T>
void test_shapes(const Datatype& type) {
  std::vector<Shape> shapes = create_shapes(type.handle, sizeof(T));
  for (const Shape& shape : shapes) {
    const long per_item = long(shape.map.size());
    for (Layout layout : kP2pLayouts) {
      test_shape_recv<T>(type, shape, 3, 3 * per_item, layout);      // fills every item
      test_shape_recv<T>(type, shape, 5, 2 * per_item, layout);      // whole items, room to spare
      test_shape_recv<T>(type, shape, 4, 2 * per_item + 1, layout);  // ends inside an item
      test_shape_recv<T>(type, shape, 2, 0, layout);                 // nothing arrives
      test_shape_send<T>(type, shape, 3, layout);
    }
  }
  free_shapes(shapes);
}

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
  if (statuses) expect_status(what, (*statuses)[0], type.handle, 0, MPI_PROC_NULL, MPI_ANY_TAG);
}

// ---- The program ---------------------------------------------------------------

template <class T>
void test_type(const Datatype& type) {
  for (long count : kP2pCounts) {
    for (Layout layout : kP2pLayouts) {
      for (Mode mode : {Mode::standard, Mode::synchronous, Mode::buffered, Mode::ready}) {
        test_pair<T>(type, count, layout, mode);
      }
    }
  }
  for (Layout layout : kP2pLayouts) test_pair<T>(type, kLarge, layout, Mode::standard);
}

// Room for every MPI_Ibsend a rank may still have in flight: the small
// messages are at most 1023 complex doubles, and a rank sends a few dozen;
// one large message of doubles.
constexpr int kBsendMessages = 256;
constexpr int kBsendSpace = kBsendMessages * (1023 * 16 + MPI_BSEND_OVERHEAD) +
                            int(kLarge) * 8 + MPI_BSEND_OVERHEAD;

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  if (world_size() < 2) {
    std::fprintf(stderr, "nonblocking needs at least 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::vector<char> bsend_space(kBsendSpace);
  MPI_Buffer_attach(bsend_space.data(), kBsendSpace);

  const Datatype int32{MPI_INT, "MPI_INT"};
  const Datatype float64{MPI_DOUBLE, "MPI_DOUBLE"};
  const Datatype uint8{MPI_UINT8_T, "MPI_UINT8_T"};
  const Datatype complex128{MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX"};

  test_type<int32_t>(int32);
  test_type<double>(float64);
  test_type<uint8_t>(uint8);
  test_type<std::complex<double>>(complex128);

  // The other modes with a large message, and far more room than arrives.
  test_pair<double>(float64, kLarge, Layout::offset, Mode::synchronous);
  test_pair<double>(float64, kLarge, Layout::mixed_sides, Mode::buffered);
  test_pair<double>(float64, kLarge, Layout::device, Mode::ready);
  test_pair<int32_t>(int32, 5, Layout::device, Mode::standard, /*slack=*/4000);
  test_pair<uint8_t>(uint8, 1023, Layout::offset, Mode::standard, /*slack=*/kLarge);

  test_shapes<int32_t>(int32);
  test_shapes<std::complex<double>>(complex128);

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

  void* detached = nullptr;
  int detached_size = 0;
  MPI_Buffer_detach(&detached, &detached_size);
  return suite::finish();
}
