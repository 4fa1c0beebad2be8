// Point-to-point on device buffers: MPI_Send, MPI_Ssend, MPI_Bsend and
// MPI_Rsend into MPI_Recv, MPI_Sendrecv and MPI_Sendrecv_replace (and MPI
// 4.0's MPI_Isendrecv(_replace) where the MPI has them), with the receive
// status checked (count in the user's datatype, source, tag) and the part of
// the receive buffer past the message checked to be untouched.
#include <cstdio>
#include <cstdlib>

#include "point_to_point_common.h"
#include "suite.h"

namespace {

using namespace suite;

const char* send_call(Mode mode) {
  switch (mode) {
    case Mode::standard:
      return "MPI_Send";
    case Mode::synchronous:
      return "MPI_Ssend";
    case Mode::buffered:
      return "MPI_Bsend";
    case Mode::ready:
      return "MPI_Rsend";
  }
  return "?";
}

int send_in_mode(Mode mode, const void* buffer, int count, MPI_Datatype type, int dest, int tag) {
  switch (mode) {
    case Mode::standard:
      return MPI_Send(buffer, count, type, dest, tag, MPI_COMM_WORLD);
    case Mode::synchronous:
      return MPI_Ssend(buffer, count, type, dest, tag, MPI_COMM_WORLD);
    case Mode::buffered:
      return MPI_Bsend(buffer, count, type, dest, tag, MPI_COMM_WORLD);
    case Mode::ready:
      return MPI_Rsend(buffer, count, type, dest, tag, MPI_COMM_WORLD);
  }
  return MPI_ERR_OTHER;
}

template <class T>
void test_send_recv(const Datatype& type, long count, Layout layout, Mode mode) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Pair pair = pair_for(id);
  const int tag = int(id % kTagSpan);
  const Match match = Match(id % 3);
  const Case what{std::string(send_call(mode)) + "+MPI_Recv",
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "source=" + std::to_string(pair.source) + " dest=" + std::to_string(pair.dest) +
                      " match=" + match_name(match)};
  const std::vector<T> data = random_values<T>(count, id, pair.source);
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  if (rank == pair.source) {
    const Buffer send = make_buffer(data, send_memory(layout, rank), offset);
    if (mode == Mode::ready) {
      check_mpi(MPI_Recv(nullptr, 0, MPI_BYTE, pair.dest, kTagSpan + tag, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE),
                what);
    }
    check_mpi(send_in_mode(mode, send.data(), count, type.handle, pair.dest, tag), what);
    Case send_case = what;
    send_case.detail += " (send buffer)";
    expect_buffer(send_case, send, data);
  } else if (rank == pair.dest) {
    const int source_arg = match == Match::any_source ? MPI_ANY_SOURCE : pair.source;
    const int tag_arg = match == Match::any_tag ? MPI_ANY_TAG : tag;
    const int capacity = int(count + kSlack);
    MPI_Status status;
    if (mode == Mode::ready) {
      // Rsend needs the receive posted before the send starts, so this one is
      // nonblocking, into host memory, and the sender waits for a signal.
      const Buffer recv = make_buffer(poisoned<T>(capacity), Memory::host);
      MPI_Request request;
      check_mpi(MPI_Irecv(recv.data(), capacity, type.handle, source_arg, tag_arg, MPI_COMM_WORLD,
                          &request),
                what);
      check_mpi(MPI_Send(nullptr, 0, MPI_BYTE, pair.source, kTagSpan + tag, MPI_COMM_WORLD), what);
      check_mpi(MPI_Wait(&request, &status), what);
      expect_buffer(what, recv, with_slack(data));
    } else {
      const Buffer recv = make_buffer(poisoned<T>(capacity), recv_memory(layout, rank), offset);
      check_mpi(MPI_Recv(recv.data(), capacity, type.handle, source_arg, tag_arg, MPI_COMM_WORLD,
                         &status),
                what);
      expect_buffer(what, recv, with_slack(data));
    }
    expect_status(what, status, type.handle, int(count), pair.source, tag);
  }
}

// MPICH (4.0.2 and 5.0.2) leaves the status that completes an
// MPI_Isendrecv(_replace) request as it was, host buffers without Ferry alike.
bool isendrecv_fills_status() {
  static const bool fills = !mpi_library_is("MPICH");
  return fills;
}

// Every rank sends to the rank `shift` above it and receives from the one
// `shift` below; nonblocking: MPI 4.0's MPI_Isendrecv(_replace), then
// MPI_Wait.
template <class T>
void test_sendrecv(const Datatype& type, long count, Layout layout, bool replace, bool nonblocking = false) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int ranks = world_size();
  const int shift = 1 + int(id % uint64_t(ranks - 1));
  const int dest = (rank + shift) % ranks;
  const int source = (rank - shift + ranks) % ranks;
  const int tag = int(id % kTagSpan);
  const char* call = replace ? (nonblocking ? "MPI_Isendrecv_replace" : "MPI_Sendrecv_replace")
                             : (nonblocking ? "MPI_Isendrecv" : "MPI_Sendrecv");
  const Case what{call,
                  type.name,
                  "",
                  count,
                  layout_name(layout),
                  "shift=" + std::to_string(shift)};
  const std::vector<T> outgoing = random_values<T>(count, id, rank);
  const std::vector<T> incoming = random_values<T>(count, id, source);
  const size_t offset = offset_bytes(layout, sizeof(T), id);
  MPI_Status status;
  if (replace) {
    const Buffer buffer = make_buffer(outgoing, send_memory(layout, rank), offset);
    if (nonblocking) {
#if SUITE_MPI_40
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Isendrecv_replace(buffer.data(), count, type.handle, dest, tag, source, tag, MPI_COMM_WORLD,
                                      &request),
                what);
      check_mpi(MPI_Wait(&request, &status), what);
#endif
    } else {
      check_mpi(MPI_Sendrecv_replace(buffer.data(), count, type.handle, dest, tag, source, tag, MPI_COMM_WORLD,
                                     &status),
                what);
    }
    expect_buffer(what, buffer, incoming);
  } else {
    const std::vector<T> recv_initial = poisoned<T>(count + kSlack);
    const Operands operands = place(layout, id, rank, /*in_place=*/false, &outgoing, &recv_initial);
    if (nonblocking) {
#if SUITE_MPI_40
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Isendrecv(operands.send_arg(), count, type.handle, dest, tag, operands.recv_arg(),
                              count + kSlack, type.handle, source, tag, MPI_COMM_WORLD, &request),
                what);
      check_mpi(MPI_Wait(&request, &status), what);
#endif
    } else {
      check_mpi(MPI_Sendrecv(operands.send_arg(), count, type.handle, dest, tag, operands.recv_arg(),
                             count + kSlack, type.handle, source, tag, MPI_COMM_WORLD, &status),
                what);
    }
    check_operands(what, operands, with_slack(incoming), &outgoing);
  }
  if (!nonblocking || isendrecv_fills_status()) expect_status(what, status, type.handle, int(count), source, tag);
}

// MPI_PROC_NULL as both peers: nothing moves, and the status says so.
template <class T>
void test_proc_null(const Datatype& type, Layout layout) {
  const uint64_t id = next_case_id();
  const long count = 7;
  const Case what{"MPI_Sendrecv", type.name, "", count, layout_name(layout), "peers=MPI_PROC_NULL"};
  const std::vector<T> outgoing = random_values<T>(count, id, world_rank());
  const std::vector<T> untouched = poisoned<T>(count);
  const Operands operands =
      place(layout, id, world_rank(), /*in_place=*/false, &outgoing, &untouched);
  MPI_Status status;
  check_mpi(
      MPI_Sendrecv(operands.send_arg(), count, type.handle, MPI_PROC_NULL, 0, operands.recv_arg(),
                   count, type.handle, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &status),
      what);
  check_operands(what, operands, untouched, &outgoing);
  expect_status(what, status, type.handle, 0, MPI_PROC_NULL, MPI_ANY_TAG);
}

template <class T>
void test_type(const Datatype& type) {
  for (long count : kP2pCounts) {
    for (Layout layout : kP2pLayouts) {
      for (Mode mode : {Mode::standard, Mode::synchronous, Mode::buffered, Mode::ready}) {
        test_send_recv<T>(type, count, layout, mode);
      }
      test_sendrecv<T>(type, count, layout, false);
      test_sendrecv<T>(type, count, layout, true);
      if (SUITE_MPI_40) {
        test_sendrecv<T>(type, count, layout, false, true);
        test_sendrecv<T>(type, count, layout, true, true);
      }
    }
  }
  for (Layout layout : kP2pLayouts) test_proc_null<T>(type, layout);
}

void test_large_counts() {
  const long large = 1 << 20;
  test_send_recv<double>({MPI_DOUBLE, "MPI_DOUBLE"}, large, Layout::device, Mode::standard);
  test_send_recv<int32_t>({MPI_INT, "MPI_INT"}, large, Layout::offset, Mode::synchronous);
  test_sendrecv<uint8_t>({MPI_UINT8_T, "MPI_UINT8_T"}, large, Layout::offset, false);
  test_sendrecv<float>({MPI_FLOAT, "MPI_FLOAT"}, large, Layout::mixed_ranks, true);
  if (SUITE_MPI_40) {
    test_sendrecv<uint8_t>({MPI_UINT8_T, "MPI_UINT8_T"}, large, Layout::device, false, true);
    test_sendrecv<double>({MPI_DOUBLE, "MPI_DOUBLE"}, large, Layout::offset, true, true);
  }
}

// Room for every MPI_Bsend a rank may still have in flight: each case's
// message is at most 1023 complex doubles, and a rank sends a few dozen.
constexpr int kBsendMessages = 256;
constexpr int kBsendSpace = kBsendMessages * (1023 * 16 + MPI_BSEND_OVERHEAD);

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  if (world_size() < 2) {
    std::fprintf(stderr, "point_to_point needs at least 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::vector<char> bsend_space(kBsendSpace);
  MPI_Buffer_attach(bsend_space.data(), kBsendSpace);
  test_type<uint8_t>({MPI_UINT8_T, "MPI_UINT8_T"});
  test_type<int32_t>({MPI_INT, "MPI_INT"});
  test_type<double>({MPI_DOUBLE, "MPI_DOUBLE"});
  test_type<std::complex<double>>({MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX"});
  test_large_counts();
  void* detached = nullptr;
  int detached_size = 0;
  MPI_Buffer_detach(&detached, &detached_size);
  return suite::finish();
}
