// Point-to-point where the rules of matching meet sends through peer memory
// (mpi_shim/peer_pt2pt.h): device and host messages and empty ones on one
// tag in order, wildcards over many senders, probes of every kind, a
// receive that is too short, a receive type with holes, a freed and a
// cancelled send, communicators made every way, MPI_Sendrecv(_replace),
// persistent requests, halo exchanges by nonblocking calls and sends that
// complete before their receive is posted. Every case is valid MPI (the
// last needs the small message buffered, as Open MPI does), so the program
// also runs on plain Open MPI with host buffers (the baseline).
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "completion.h"
#include "suite.h"

using namespace suite;

namespace {

constexpr int kTag = 7;
// Above FERRY_PT2PT_MIN_BYTES (4 KiB by default), odd.
constexpr long kLarge = 70001;
constexpr long kMedium = 1001;

Memory other(Memory m) { return m == Memory::device ? Memory::host : Memory::device; }

void expect_values(const Case& what, const Buffer& buffer, const std::vector<double>& want, const char* label) {
  const std::vector<double> got = read_back<double>(buffer, want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      fail(what, std::string(label) + ": element " + std::to_string(i) + " is " + show(got[i]) + ", want " +
                     show(want[i]));
      return;
    }
  }
  expect(buffer.guards_intact(), what, std::string(label) + ": guard bytes overwritten");
}

void expect_count(const Case& what, const MPI_Status& status, MPI_Datatype type, int want, const char* label) {
  int count = -1;
  MPI_Get_count(&status, type, &count);
  expect(count == want, what,
         std::string(label) + ": count " + std::to_string(count) + ", want " + std::to_string(want));
}

// One tag, one sender: a device message, a host one, an empty one, another
// device one, an empty one from device memory. They arrive in that order
// whatever memory the receives use, blocking or not.
void test_order(Memory receive_memory) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{"order on one tag", "MPI_DOUBLE", "", kLarge, "", "receive into " +
                  std::string(receive_memory == Memory::device ? "device" : "host")};
  const std::vector<long> counts{kLarge, kMedium, 0, kLarge + 2, 0};
  if (rank == 0) {
    std::vector<Buffer> sent;
    for (size_t m = 0; m < counts.size(); ++m) {
      const Memory memory = m == 1 ? Memory::host : Memory::device;
      sent.push_back(make_buffer(random_values<double>(std::max(counts[m], 1L), id + m, rank), memory));
      check_mpi(MPI_Send(sent.back().data(), int(counts[m]), MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD), what);
    }
  } else if (rank == 1) {
    std::vector<Buffer> received;
    std::vector<MPI_Request> requests(counts.size(), MPI_REQUEST_NULL);
    std::vector<MPI_Status> statuses(counts.size());
    MPI_Status first;
    for (size_t m = 0; m < counts.size(); ++m) {
      const Memory memory = m % 2 ? other(receive_memory) : receive_memory;
      received.push_back(make_buffer(poisoned<double>(kLarge + 2), memory));
      if (m == 0) {
        check_mpi(MPI_Recv(received[m].data(), int(kLarge + 2), MPI_DOUBLE, 0, kTag, MPI_COMM_WORLD, &first),
                  what);
      } else {
        check_mpi(MPI_Irecv(received[m].data(), int(kLarge + 2), MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG,
                            MPI_COMM_WORLD, &requests[m]),
                  what);
      }
    }
    check_mpi(MPI_Waitall(int(counts.size()), requests.data(), statuses.data()), what);
    statuses[0] = first;
    for (size_t m = 0; m < counts.size(); ++m) {
      const std::string label = "message " + std::to_string(m);
      expect_count(what, statuses[m], MPI_DOUBLE, int(counts[m]), label.c_str());
      std::vector<double> want = random_values<double>(std::max(counts[m], 1L), id + m, 0);
      want.resize(counts[m]);
      expect_values(what, received[m], want, label.c_str());
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Every other rank sends rank 0 a device message of its own length and tag;
// rank 0 takes them with MPI_ANY_SOURCE and MPI_ANY_TAG, in any order.
void test_wildcards() {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int size = world_size();
  const Case what{"MPI_ANY_SOURCE, MPI_ANY_TAG", "MPI_DOUBLE", "", kLarge, "device", "senders 1.."};
  auto count_of = [](int sender) { return int(kMedium * sender + 3); };
  if (rank != 0) {
    const Buffer data = make_buffer(random_values<double>(count_of(rank), id, rank), Memory::device);
    check_mpi(MPI_Send(data.data(), count_of(rank), MPI_DOUBLE, 0, 100 + rank, MPI_COMM_WORLD), what);
  } else {
    std::vector<bool> seen(size, false);
    for (int m = 1; m < size; ++m) {
      const Buffer into = make_buffer(poisoned<double>(count_of(size)), m % 2 ? Memory::host : Memory::device);
      MPI_Status status;
      check_mpi(MPI_Recv(into.data(), count_of(size), MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                         &status),
                what);
      const int from = status.MPI_SOURCE;
      if (from < 1 || from >= size || seen[from]) {
        fail(what, "source " + std::to_string(from));
        continue;
      }
      seen[from] = true;
      expect(status.MPI_TAG == 100 + from, what, "tag " + std::to_string(status.MPI_TAG));
      expect_count(what, status, MPI_DOUBLE, count_of(from), "count");
      expect_values(what, into, random_values<double>(count_of(from), id, from), "data");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

enum class ProbeKind { blocking, nonblocking, matched, matched_nonblocking };

// The probe reports the message's own count (a marker's data), and the
// receive sized from it gets the data.
void test_probe(ProbeKind kind) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const char* names[] = {"MPI_Probe", "MPI_Iprobe", "MPI_Mprobe+MPI_Mrecv", "MPI_Improbe+MPI_Imrecv"};
  const Case what{names[int(kind)], "MPI_DOUBLE", "", kLarge, "device", ""};
  const std::vector<long> counts{kLarge, 0, kMedium};
  if (rank == 0) {
    for (size_t m = 0; m < counts.size(); ++m) {
      const Buffer data = make_buffer(random_values<double>(std::max(counts[m], 1L), id + m, rank), Memory::device);
      check_mpi(MPI_Send(data.data(), int(counts[m]), MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD), what);
    }
  } else if (rank == 1) {
    for (size_t m = 0; m < counts.size(); ++m) {
      MPI_Status status;
      MPI_Message message = MPI_MESSAGE_NULL;
      int flag = 0;
      switch (kind) {
        case ProbeKind::blocking:
          check_mpi(MPI_Probe(0, kTag, MPI_COMM_WORLD, &status), what);
          break;
        case ProbeKind::nonblocking:
          while (!flag) check_mpi(MPI_Iprobe(0, kTag, MPI_COMM_WORLD, &flag, &status), what);
          break;
        case ProbeKind::matched:
          check_mpi(MPI_Mprobe(0, kTag, MPI_COMM_WORLD, &message, &status), what);
          break;
        case ProbeKind::matched_nonblocking:
          while (!flag) check_mpi(MPI_Improbe(0, kTag, MPI_COMM_WORLD, &flag, &message, &status), what);
          break;
      }
      int count = -1;
      MPI_Get_count(&status, MPI_DOUBLE, &count);
      expect(count == counts[m], what, "probed count " + std::to_string(count));
      if (count < 0) count = 0;
      const Buffer into = make_buffer(poisoned<double>(std::max(count, 1)), m % 2 ? Memory::host : Memory::device);
      MPI_Status received;
      if (kind == ProbeKind::matched) {
        check_mpi(MPI_Mrecv(into.data(), count, MPI_DOUBLE, &message, &received), what);
      } else if (kind == ProbeKind::matched_nonblocking) {
        MPI_Request request;
        check_mpi(MPI_Imrecv(into.data(), count, MPI_DOUBLE, &message, &request), what);
        check_mpi(MPI_Wait(&request, &received), what);
      } else {
        check_mpi(MPI_Recv(into.data(), count, MPI_DOUBLE, 0, kTag, MPI_COMM_WORLD, &received), what);
      }
      expect_count(what, received, MPI_DOUBLE, int(counts[m]), "received count");
      std::vector<double> want = random_values<double>(std::max(counts[m], 1L), id + m, 0);
      want.resize(counts[m]);
      expect_values(what, into, want, "data");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A receive shorter than the message: MPI_ERR_TRUNCATE (MPI_ERRORS_RETURN is
// set), the sender completes, and the next message on the tag is intact.
// Not on Open MPI 5.0, which writes past the receive buffer there (host
// buffers without Ferry alike: the heap is corrupted).
void test_truncate(Memory receive_memory) {
  if (mpi_library_is("Open MPI v5.")) return;
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{"MPI_Recv too short", "MPI_DOUBLE", "", kLarge, "", ""};
  if (rank == 0) {
    const Buffer first = make_buffer(random_values<double>(kLarge, id, rank), Memory::device);
    const Buffer second = make_buffer(random_values<double>(kMedium, id + 1, rank), Memory::device);
    check_mpi(MPI_Send(first.data(), int(kLarge), MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD), what);
    check_mpi(MPI_Send(second.data(), int(kMedium), MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD), what);
  } else if (rank == 1) {
    const Buffer into = make_buffer(poisoned<double>(kMedium), receive_memory);
    MPI_Status status;
    const int rc = MPI_Recv(into.data(), int(kMedium), MPI_DOUBLE, 0, kTag, MPI_COMM_WORLD, &status);
    int error_class = MPI_SUCCESS;
    MPI_Error_class(rc, &error_class);
    expect(error_class == MPI_ERR_TRUNCATE, what, "error class " + std::to_string(error_class));
    const Buffer next = make_buffer(poisoned<double>(kMedium), receive_memory);
    check_mpi(MPI_Recv(next.data(), int(kMedium), MPI_DOUBLE, 0, kTag, MPI_COMM_WORLD, &status), what);
    expect_values(what, next, random_values<double>(kMedium, id + 1, 0), "next message");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A contiguous device message into every other double of the receive
// buffer: the holes keep their values.
void test_strided_receive(Memory receive_memory) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{"receive into a vector type", "MPI_DOUBLE", "", kLarge, "", ""};
  const int count = int(kLarge / 2);
  if (rank == 0) {
    const Buffer data = make_buffer(random_values<double>(count, id, rank), Memory::device);
    check_mpi(MPI_Send(data.data(), count, MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD), what);
  } else if (rank == 1) {
    MPI_Datatype every_other;
    MPI_Type_vector(count, 1, 2, MPI_DOUBLE, &every_other);
    MPI_Type_commit(&every_other);
    const std::vector<double> before = poisoned<double>(2 * count);
    const Buffer into = make_buffer(before, receive_memory);
    MPI_Status status;
    check_mpi(MPI_Recv(into.data(), 1, every_other, 0, kTag, MPI_COMM_WORLD, &status), what);
    std::vector<double> want = before;
    const std::vector<double> data = random_values<double>(count, id, 0);
    for (int i = 0; i < count; ++i) want[2 * i] = data[i];
    expect_values(what, into, want, "strided");
    expect_count(what, status, MPI_DOUBLE, count, "count");
    MPI_Type_free(&every_other);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// MPI_Request_free right after a device MPI_Isend, and MPI_Cancel of another:
// the first is delivered; the second either is cancelled (then nothing
// arrives) or completes and is delivered. The sender says which.
void test_free_and_cancel() {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{"MPI_Request_free, MPI_Cancel of a device MPI_Isend", "MPI_DOUBLE", "", kLarge, "device", ""};
  if (rank == 0) {
    const Buffer freed = make_buffer(random_values<double>(kLarge, id, rank), Memory::device);
    const Buffer cancelled = make_buffer(random_values<double>(kLarge, id + 1, rank), Memory::device);
    MPI_Request request;
    check_mpi(MPI_Isend(freed.data(), int(kLarge), MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD, &request), what);
    check_mpi(MPI_Request_free(&request), what);
    check_mpi(MPI_Isend(cancelled.data(), int(kLarge), MPI_DOUBLE, 1, kTag + 1, MPI_COMM_WORLD, &request), what);
    check_mpi(MPI_Cancel(&request), what);
    MPI_Status status;
    check_mpi(MPI_Wait(&request, &status), what);
    int was_cancelled = 0;
    MPI_Test_cancelled(&status, &was_cancelled);
    check_mpi(MPI_Send(&was_cancelled, 1, MPI_INT, 1, kTag + 2, MPI_COMM_WORLD), what);
    MPI_Barrier(MPI_COMM_WORLD);  // the buffers stay until the receiver is done
  } else if (rank == 1) {
    // The receive for the cancelled send is posted first, so the sender's
    // wait can complete either way.
    const Buffer second = make_buffer(poisoned<double>(kLarge), Memory::host);
    MPI_Request pending;
    check_mpi(MPI_Irecv(second.data(), int(kLarge), MPI_DOUBLE, 0, kTag + 1, MPI_COMM_WORLD, &pending), what);
    const Buffer into = make_buffer(poisoned<double>(kLarge), Memory::device);
    check_mpi(MPI_Recv(into.data(), int(kLarge), MPI_DOUBLE, 0, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
    expect_values(what, into, random_values<double>(kLarge, id, 0), "freed send");
    int was_cancelled = 0;
    check_mpi(MPI_Recv(&was_cancelled, 1, MPI_INT, 0, kTag + 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
    if (was_cancelled) check_mpi(MPI_Cancel(&pending), what);
    MPI_Status status;
    check_mpi(MPI_Wait(&pending, &status), what);
    int receive_cancelled = 0;
    MPI_Test_cancelled(&status, &receive_cancelled);
    expect(receive_cancelled == was_cancelled, what, "the receive of a cancelled send completed");
    if (!was_cancelled) expect_values(what, second, random_values<double>(kLarge, id + 1, 0), "cancel refused");
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The same tag on several communicators made from MPI_COMM_WORLD (and one
// from another), interleaved: each receive gets its own communicator's
// message. Ranks 0 and the last exchange, in reverse order on the split.
void test_communicators() {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int size = world_size();
  const Case what{"messages on derived communicators", "MPI_DOUBLE", "", kLarge, "device", ""};
  std::vector<MPI_Comm> comms;
  MPI_Comm dup, split, cart, grouped, dup_of_split;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &split);
  const int dims[1] = {size}, periods[1] = {0};
  MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &cart);
  MPI_Group world_group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Comm_create_group(MPI_COMM_WORLD, world_group, 5, &grouped);
  MPI_Group_free(&world_group);
  MPI_Comm_dup(split, &dup_of_split);
  comms = {MPI_COMM_WORLD, dup, split, cart, grouped, dup_of_split};
  for (MPI_Comm c : comms) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  // In every communicator: the first world rank sends to the last.
  auto rank_in = [&](MPI_Comm c, int world) {
    MPI_Group g, w;
    MPI_Comm_group(c, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    int out = MPI_UNDEFINED;
    MPI_Group_translate_ranks(w, 1, &world, g, &out);
    MPI_Group_free(&g);
    MPI_Group_free(&w);
    return out;
  };
  const int sender = 0, receiver = size - 1;
  if (rank == sender) {
    std::vector<Buffer> sent;
    std::vector<MPI_Request> requests(comms.size());
    for (size_t c = 0; c < comms.size(); ++c) {
      sent.push_back(make_buffer(random_values<double>(kLarge + c, id + c, rank), Memory::device));
      check_mpi(MPI_Isend(sent.back().data(), int(kLarge + c), MPI_DOUBLE, rank_in(comms[c], receiver), kTag,
                          comms[c], &requests[c]),
                what);
    }
    check_mpi(MPI_Waitall(int(comms.size()), requests.data(), MPI_STATUSES_IGNORE), what);
  } else if (rank == receiver) {
    // Last communicator first.
    for (size_t k = comms.size(); k-- > 0;) {
      const Buffer into = make_buffer(poisoned<double>(kLarge + comms.size()), k % 2 ? Memory::host : Memory::device);
      MPI_Status status;
      check_mpi(MPI_Recv(into.data(), int(kLarge + comms.size()), MPI_DOUBLE, MPI_ANY_SOURCE, kTag, comms[k],
                         &status),
                what);
      const std::string label = "communicator " + std::to_string(k);
      expect_count(what, status, MPI_DOUBLE, int(kLarge + k), label.c_str());
      expect_values(what, into, random_values<double>(kLarge + k, id + k, sender), label.c_str());
    }
  }
  for (size_t c = 1; c < comms.size(); ++c) MPI_Comm_free(&comms[c]);
  MPI_Barrier(MPI_COMM_WORLD);
}

// A ring shift of device buffers with MPI_Sendrecv, then back with
// MPI_Sendrecv_replace.
void test_sendrecv() {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int size = world_size();
  const Case what{"MPI_Sendrecv, MPI_Sendrecv_replace ring", "MPI_DOUBLE", "", kLarge, "device", ""};
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  const Buffer mine = make_buffer(random_values<double>(kLarge, id, rank), Memory::device);
  const Buffer from_left = make_buffer(poisoned<double>(kLarge), rank % 2 ? Memory::host : Memory::device);
  MPI_Status status;
  check_mpi(MPI_Sendrecv(mine.data(), int(kLarge), MPI_DOUBLE, right, kTag, from_left.data(), int(kLarge),
                         MPI_DOUBLE, left, kTag, MPI_COMM_WORLD, &status),
            what);
  expect_values(what, from_left, random_values<double>(kLarge, id, left), "MPI_Sendrecv");
  check_mpi(MPI_Sendrecv_replace(from_left.data(), int(kLarge), MPI_DOUBLE, left, kTag, right, kTag, MPI_COMM_WORLD,
                                 &status),
            what);
  expect_values(what, from_left, random_values<double>(kLarge, id, rank), "MPI_Sendrecv_replace");
  MPI_Barrier(MPI_COMM_WORLD);
}

// A blocking device send to a receive that is already waiting (it may copy
// straight from the send buffer) and to one that comes 20 ms late: both
// deliver, and the sender may overwrite its buffer as soon as MPI_Send
// returns.
void test_early_and_late_receive() {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{"MPI_Send to an early and a late MPI_Recv", "MPI_DOUBLE", "", kLarge, "device", ""};
  for (int late = 0; late < 2; ++late) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      Buffer data = make_buffer(random_values<double>(kLarge, id + late, rank), Memory::device);
      check_mpi(MPI_Send(data.data(), int(kLarge), MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD), what);
      data.write(poisoned<double>(kLarge).data(), kLarge * sizeof(double));
    } else if (rank == 1) {
      const Buffer into = make_buffer(poisoned<double>(kLarge), late ? Memory::host : Memory::device);
      if (late) {
        const double until = MPI_Wtime() + 0.02;
        while (MPI_Wtime() < until) {
        }
      }
      check_mpi(MPI_Recv(into.data(), int(kLarge), MPI_DOUBLE, 0, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
      expect_values(what, into, random_values<double>(kLarge, id + late, 0), late ? "late" : "early");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A halo exchange around the ring, 16 rounds: each rank posts MPI_Irecv
// from both neighbours and MPI_Isend of device buffers to both, the sends
// before the receives in the request array on odd rounds, and completes
// them with each completion call in turn. A nonblocking send offers its
// buffer to the receive: the data must arrive whether the offer is taken
// or withdrawn, and a send buffer may be overwritten once its request is
// complete.
void test_halo_exchange() {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int ranks = world_size();
  const int left = (rank + ranks - 1) % ranks;
  const int right = (rank + 1) % ranks;
  constexpr int kRightward = kTag, kLeftward = kTag + 1;
  // What sender sends in round toward its right (+1) or left (-1) neighbour.
  auto message = [&](long count, int round, int sender, int toward) {
    return random_values<double>(count, id + 4 * uint64_t(round) + (toward > 0 ? 0 : 1), sender);
  };
  for (int round = 0; round < kCompletions; ++round) {
    const long count = round % 3 == 2 ? kMedium : kLarge + round;
    const bool sends_first = round % 2 == 1;
    const Completion how = completion(round);
    const Case what{"halo exchange by MPI_Irecv and MPI_Isend", "MPI_DOUBLE", "", count, "device",
                    completion_name(how) + (sends_first ? ", sends first" : ", receives first")};
    Buffer to_right = make_buffer(message(count, round, rank, +1), Memory::device);
    Buffer to_left = make_buffer(message(count, round, rank, -1), Memory::device);
    const Buffer from_left = make_buffer(poisoned<double>(count), Memory::device);
    const Buffer from_right = make_buffer(poisoned<double>(count), Memory::device);
    std::vector<MPI_Request> requests(4, MPI_REQUEST_NULL);
    const int receives = sends_first ? 2 : 0, sends = sends_first ? 0 : 2;
    check_mpi(MPI_Irecv(from_left.data(), int(count), MPI_DOUBLE, left, kRightward, MPI_COMM_WORLD,
                        &requests[receives]),
              what);
    check_mpi(MPI_Irecv(from_right.data(), int(count), MPI_DOUBLE, right, kLeftward, MPI_COMM_WORLD,
                        &requests[receives + 1]),
              what);
    check_mpi(MPI_Isend(to_right.data(), int(count), MPI_DOUBLE, right, kRightward, MPI_COMM_WORLD, &requests[sends]),
              what);
    check_mpi(MPI_Isend(to_left.data(), int(count), MPI_DOUBLE, left, kLeftward, MPI_COMM_WORLD,
                        &requests[sends + 1]),
              what);
    complete(how, requests, what);
    to_right.write(poisoned<double>(count).data(), count * sizeof(double));
    to_left.write(poisoned<double>(count).data(), count * sizeof(double));
    expect_values(what, from_left, message(count, round, left, +1), "from the left");
    expect_values(what, from_right, message(count, round, right, -1), "from the right");
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Ranks in pairs MPI_Isend a small device message to each other and wait
// for their send before posting the receive. MPI lets such a send wait for
// its receive; Open MPI buffers small ones, and programs count on it: the
// send's offer is withdrawn (its data copied to a bounce buffer), so the
// send completes, and the buffer is overwritten before the peer receives.
void test_send_completes_before_its_receive() {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int partner = rank % 2 ? rank - 1 : rank + 1;
  // Under Open MPI's shared-memory eager limit (4 KiB) for the host baseline.
  constexpr long kSmall = 101;
  const Case what{"MPI_Isend, MPI_Wait, then MPI_Recv on both sides", "MPI_DOUBLE", "", kSmall, "device", ""};
  if (partner < world_size()) {
    for (const Completion how : {Completion{Call::wait, false}, Completion{Call::test, true},
                                 Completion{Call::waitall, false}, Completion{Call::testsome, false}}) {
      Buffer data = make_buffer(random_values<double>(kSmall, id + int(how.call), rank), Memory::device);
      std::vector<MPI_Request> requests{MPI_REQUEST_NULL};
      check_mpi(MPI_Isend(data.data(), int(kSmall), MPI_DOUBLE, partner, kTag, MPI_COMM_WORLD, &requests[0]), what);
      complete(how, requests, what);
      data.write(poisoned<double>(kSmall).data(), kSmall * sizeof(double));
      const Buffer into = make_buffer(poisoned<double>(kSmall), Memory::device);
      check_mpi(MPI_Recv(into.data(), int(kSmall), MPI_DOUBLE, partner, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                what);
      expect_values(what, into, random_values<double>(kSmall, id + int(how.call), partner), completion_name(how).c_str());
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Rank 0 sends rank 1 four device messages of different lengths on one
// tag; rank 1 posts their receives in order, lets them all match (a host
// message sent after them has arrived), and completes them last first,
// with each completion call in turn. Each receive must get the message MPI matched to it (the one sent
// in the order it was posted), whatever order it is completed in.
void test_completed_out_of_posting_order() {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  constexpr int kMessages = 4;
  auto length = [](int m) { return kMedium + 7 * m; };
  for (int number = 0; number < kCompletions; ++number) {
    const Completion how = completion(number);
    const Case what{"receives completed last first", "MPI_DOUBLE", "", kMedium, "device",
                    completion_name(how)};
    if (rank == 0) {
      std::vector<Buffer> data;
      std::vector<MPI_Request> sends(kMessages, MPI_REQUEST_NULL);
      for (int m = 0; m < kMessages; ++m) {
        data.push_back(make_buffer(random_values<double>(length(m), id + 16 * number + m, rank), Memory::device));
        check_mpi(MPI_Isend(data.back().data(), int(length(m)), MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD, &sends[m]),
                  what);
      }
      const int all_sent = 1;
      check_mpi(MPI_Send(&all_sent, 1, MPI_INT, 1, kTag + 1, MPI_COMM_WORLD), what);
      check_mpi(MPI_Waitall(kMessages, sends.data(), MPI_STATUSES_IGNORE), what);
    } else if (rank == 1) {
      std::vector<Buffer> into;
      std::vector<MPI_Request> requests(kMessages, MPI_REQUEST_NULL);
      for (int m = 0; m < kMessages; ++m) {
        into.push_back(make_buffer(poisoned<double>(kMedium + 7 * kMessages), m % 2 ? Memory::host : Memory::device));
        check_mpi(MPI_Irecv(into.back().data(), int(kMedium + 7 * kMessages), MPI_DOUBLE, 0, kTag, MPI_COMM_WORLD,
                            &requests[kMessages - 1 - m]),
                  what);
      }
      int all_sent = 0;
      check_mpi(MPI_Recv(&all_sent, 1, MPI_INT, 0, kTag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), what);
      const std::optional<std::vector<MPI_Status>> statuses = complete(how, requests, what);
      for (int m = 0; m < kMessages; ++m) {
        const std::string label = "message " + std::to_string(m);
        expect_values(what, into[m], random_values<double>(length(m), id + 16 * number + m, 0), label.c_str());
        if (statuses) expect_count(what, (*statuses)[kMessages - 1 - m], MPI_DOUBLE, int(length(m)), label.c_str());
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Persistent requests, started three times: an empty send and a device one
// on one tag, received by a persistent host receive and a device one.
void test_persistent() {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const Case what{"persistent send and receive", "MPI_DOUBLE", "", kLarge, "", ""};
  for (int round = 0; round < 3; ++round) {
    if (rank == 0) {
      const Buffer data = make_buffer(random_values<double>(kLarge, id + round, rank), Memory::device);
      MPI_Request requests[2];
      check_mpi(MPI_Send_init(data.data(), 0, MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD, &requests[0]), what);
      check_mpi(MPI_Send_init(data.data(), int(kLarge), MPI_DOUBLE, 1, kTag, MPI_COMM_WORLD, &requests[1]), what);
      for (int start = 0; start < 2; ++start) {
        check_mpi(MPI_Start(&requests[0]), what);
        check_mpi(MPI_Wait(&requests[0], MPI_STATUS_IGNORE), what);
        check_mpi(MPI_Start(&requests[1]), what);
        check_mpi(MPI_Wait(&requests[1], MPI_STATUS_IGNORE), what);
      }
      MPI_Request_free(&requests[0]);
      MPI_Request_free(&requests[1]);
    } else if (rank == 1) {
      const Buffer host = make_buffer(poisoned<double>(kLarge), Memory::host);
      const Buffer device = make_buffer(poisoned<double>(kLarge), Memory::device);
      MPI_Request requests[2];
      check_mpi(MPI_Recv_init(host.data(), int(kLarge), MPI_DOUBLE, 0, kTag, MPI_COMM_WORLD, &requests[0]), what);
      check_mpi(MPI_Recv_init(device.data(), int(kLarge), MPI_DOUBLE, 0, kTag, MPI_COMM_WORLD, &requests[1]), what);
      for (int start = 0; start < 2; ++start) {
        MPI_Status statuses[2];
        check_mpi(MPI_Startall(2, requests), what);
        check_mpi(MPI_Waitall(2, requests, statuses), what);
        expect_count(what, statuses[0], MPI_DOUBLE, 0, "empty message");
        expect_count(what, statuses[1], MPI_DOUBLE, int(kLarge), "device message");
        expect_values(what, device, random_values<double>(kLarge, id + round, 0), "device message");
      }
      MPI_Request_free(&requests[0]);
      MPI_Request_free(&requests[1]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  if (world_size() < 2) {
    std::fprintf(stderr, "peer_messages needs at least 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (Memory memory : {Memory::device, Memory::host}) {
    test_order(memory);
    test_truncate(memory);
    test_strided_receive(memory);
  }
  test_wildcards();
  for (ProbeKind kind :
       {ProbeKind::blocking, ProbeKind::nonblocking, ProbeKind::matched, ProbeKind::matched_nonblocking})
    test_probe(kind);
  test_free_and_cancel();
  test_communicators();
  test_sendrecv();
  test_early_and_late_receive();
  test_persistent();
  test_halo_exchange();
  test_send_completes_before_its_receive();
  test_completed_out_of_posting_order();
  return suite::finish();
}
