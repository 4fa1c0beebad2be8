// Nonblocking point-to-point on device buffers: MPI_Isend, MPI_Issend,
// MPI_Ibsend and MPI_Irsend into MPI_Irecv, finished by every completion call
// (MPI_Wait, MPI_Test and their all/any/some forms, with statuses and with
// MPI_STATUS(ES)_IGNORE), MPI_Cancel of a receive and MPI_Request_free of a
// send. The received data, the part of the receive buffer the message did not
// reach (the slack past it, the holes of a derived type), the send buffer
// after completion and every status the calls return are checked.
//
// This half sends one message at a time, of basic and of derived types;
// nonblocking_matching.cc has the rest.
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

  test_matching_and_lifetimes();

  void* detached = nullptr;
  int detached_size = 0;
  MPI_Buffer_detach(&detached, &detached_size);
  return suite::finish();
}
