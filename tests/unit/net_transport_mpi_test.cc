// The net transport over the provider FERRY_NET names (mpi by default, or
// socket), between real MPI processes (no libferry.so): messages of host
// and device memory in every pairing, odd sizes around the chunk size,
// several in flight on one tag (matched in posting order), sends handed to
// the network whole before their receives are posted, bad arguments
// refused, and a receive whose sender never comes ending in kTimeout, after
// which the transport refuses more. Every byte is checked against what its
// sender wrote. Prints "No Errors" when all passed (FerryMpiTest's
// convention).
//
// With the argument "killed" (two ranks, a launcher that keeps the job
// running): rank 1 kills itself while rank 0 waits on a receive from it,
// which must end in kPeerEnded within a few seconds.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/bootstrap/mpi_bootstrap.h"
#include "engine/gpu/gpu.h"
#include "engine/transport/net_transport.h"

namespace {

using namespace ferry;

int failures = 0;

void expect(bool condition, const std::string& what) {
  if (condition) return;
  ++failures;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
}

constexpr std::size_t kChunk = 4096;

// The byte at i of message m from rank `from`.
std::uint8_t pattern(int from, int m, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(from) << 40) ^ (static_cast<std::uint64_t>(m) << 24) ^ i;
  x *= 0x9e3779b97f4a7c15ull;
  return static_cast<std::uint8_t>(x >> 56);
}

// Memory of one kind, filled or poisoned, read back to the host.
struct Region {
  bool device;
  std::size_t bytes;
  void* ptr = nullptr;
  Region(bool on_device, std::size_t size) : device(on_device), bytes(size) {
    const std::size_t allocated = size + 3;
    if (device) {
      if (!ok(gpu::active_backend()->device_alloc(allocated, &ptr))) ptr = nullptr;
    } else {
      ptr = new char[allocated];
    }
  }
  ~Region() {
    if (!ptr) return;
    if (device) {
      FERRY_LOG_IF_FAILED(gpu::active_backend()->device_free(ptr));
    } else {
      delete[] static_cast<char*>(ptr);
    }
  }
  // Three bytes past the allocation's start: unaligned on purpose.
  char* at() const { return static_cast<char*>(ptr) + 3; }
  void write(const std::vector<std::uint8_t>& bytes_in) { FERRY_LOG_IF_FAILED(gpu::copy(at(), bytes_in.data(), bytes)); }
  std::vector<std::uint8_t> read() const {
    std::vector<std::uint8_t> out(bytes);
    FERRY_LOG_IF_FAILED(gpu::copy(out.data(), at(), bytes));
    return out;
  }
};

std::vector<std::uint8_t> expected(int from, int m, std::size_t bytes) {
  std::vector<std::uint8_t> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = pattern(from, m, i);
  return v;
}

// Each rank sends to the next and receives from the previous, several
// messages on one tag in flight at once, in each memory pairing.
void exchange_ring(NetTransport& net, int rank, int size) {
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const std::size_t sizes[] = {1, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 17, 10 * kChunk + 5, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int pairing = 0; pairing < 4; ++pairing) {
    const bool send_device = pairing & 1, recv_device = pairing & 2;
    // Every rank's receives take recv_device memory, its sends send_device.
    std::vector<std::unique_ptr<Region>> out, in;
    std::vector<Completion> sent(std::size(sizes)), received(std::size(sizes));
    std::vector<Completion*> all;
    for (std::size_t m = 0; m < std::size(sizes); ++m) {
      out.push_back(std::make_unique<Region>(send_device, sizes[m]));
      in.push_back(std::make_unique<Region>(recv_device, sizes[m]));
      out[m]->write(expected(rank, pairing * 100 + static_cast<int>(m), sizes[m]));
      in[m]->write(std::vector<std::uint8_t>(sizes[m], 0xA5));
    }
    for (std::size_t m = 0; m < std::size(sizes); ++m) {
      expect(ok(net.post_recv(prev, in[m]->at(), sizes[m], 7, &received[m])), "post_recv");
      all.push_back(&received[m]);
    }
    for (std::size_t m = 0; m < std::size(sizes); ++m) {
      expect(ok(net.post_send(next, out[m]->at(), sizes[m], 7, &sent[m])), "post_send");
      all.push_back(&sent[m]);
    }
    expect(ok(net.wait_all(all, deadline)), "wait_all");
    for (std::size_t m = 0; m < std::size(sizes); ++m)
      expect(in[m]->read() == expected(prev, pairing * 100 + static_cast<int>(m), sizes[m]),
             "message " + std::to_string(m) + " of " + std::to_string(sizes[m]) + " bytes, pairing " +
                 std::to_string(pairing));
  }
}

// Sends handed to the network whole, at once (post_send_now) or after a
// windowed start (hand_over), before any receive is posted: the sender then
// overwrites its buffer, and every rank waits for all before it receives,
// so nothing may depend on the receive.
void hand_over_before_receive(NetTransport& net, int rank, int size) {
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const std::size_t bytes = 10 * kChunk + 5;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int way = 0; way < 2; ++way) {
    Region out(true, bytes), in(true, bytes);
    out.write(expected(rank, 500 + way, bytes));
    in.write(std::vector<std::uint8_t>(bytes, 0xA5));
    Completion sent, received;
    if (way == 0) {
      expect(ok(net.post_send_now(next, out.at(), bytes, 8, &sent, deadline)), "post_send_now");
    } else {
      expect(ok(net.post_send(next, out.at(), bytes, 8, &sent)), "post_send");
      expect(ok(net.hand_over(&sent, deadline)), "hand_over");
    }
    out.write(std::vector<std::uint8_t>(bytes, 0x5A));
    MPI_Barrier(MPI_COMM_WORLD);
    expect(ok(net.post_recv(prev, in.at(), bytes, 8, &received)), "post_recv after the barrier");
    expect(ok(net.wait_all({&sent, &received}, deadline)), "wait_all");
    expect(net.any_sent(&sent), "any_sent once done");
    expect(in.read() == expected(prev, 500 + way, bytes),
           way == 0 ? "a message sent with post_send_now" : "a message handed over after a windowed start");
  }
}

void refuse_bad_arguments(NetTransport& net, int rank, int size) {
  char byte = 0;
  Completion c;
  expect(net.post_send(size, &byte, 1, 0, &c) == Status::kInvalidArgument, "peer past the ranks");
  expect(net.post_send(rank, &byte, 1, 0, &c) == Status::kInvalidArgument, "this rank itself");
  expect(net.post_recv((rank + 1) % size, &byte, 1, -1, &c) == Status::kInvalidArgument, "negative tag");
  expect(net.post_recv((rank + 1) % size, nullptr, 1, 0, &c) == Status::kInvalidArgument, "no buffer");
  void* mapped = nullptr;
  MemoryKey key{};
  expect(net.map((rank + 1) % size, key, &mapped) == Status::kUnsupported, "map across machines");
}

// Rank 0 waits for a message nobody sends.
void time_out(NetTransport& net, int rank, int size) {
  if (rank != 0) return;
  std::vector<std::uint8_t> never(kChunk * 2);
  Completion c;
  expect(ok(net.post_recv(size - 1, never.data(), never.size(), 99, &c)), "post_recv of a message never sent");
  const auto start = std::chrono::steady_clock::now();
  expect(net.wait_all({&c}, start + std::chrono::milliseconds(300)) == Status::kTimeout, "timeout");
  expect(std::chrono::steady_clock::now() - start < std::chrono::seconds(20), "timeout in time");
  expect(!c.done, "the abandoned receive is not done");
  expect(net.post_send(size - 1, never.data(), 1, 0, &c) == Status::kTimeout, "refused after a timeout");
}

// Rank 1 dies once rank 0 waits for it; rank 0 must hear of it soon, and
// the transport then refuses more. The job cannot finalize with a dead
// rank, so rank 0 ends with _exit.
void killed_peer(NetTransport& net, int rank) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    sleep(1);
    raise(SIGKILL);
  }
  if (rank != 0) pause();
  std::vector<std::uint8_t> never(kChunk * 2);
  Completion c;
  expect(ok(net.post_recv(1, never.data(), never.size(), 5, &c)), "post_recv from the peer that dies");
  const auto start = std::chrono::steady_clock::now();
  const Status status = net.wait_all({&c}, start + std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank 0: the receive from the killed rank ended in %s after %.1f s\n", status_name(status), seconds);
  expect(status == Status::kPeerEnded, "kPeerEnded");
  expect(seconds < 6, "within a few seconds");
  expect(net.post_send(1, never.data(), 1, 0, &c) == Status::kPeerEnded, "refused afterwards");
  std::printf(failures == 0 ? "No Errors\n" : "FAIL\n");
  std::fflush(stdout);
  _exit(failures == 0 ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  expect(gpu::active_backend() != nullptr, "a device backend (FERRY_DEVICE=emulated)");
  {
    std::unique_ptr<Bootstrap> bootstrap = make_mpi_bootstrap(MPI_COMM_WORLD);
    NetTransport net(kChunk, 3);
    expect(bootstrap && ok(net.connect(*bootstrap)), "connect");
    const char* wanted = std::getenv("FERRY_NET");
    const std::string provider = wanted && *wanted ? wanted : "mpi";
    expect(net.provider() && provider == net.provider()->name(), "the " + provider + " provider");
    const bool killed = argc > 1 && std::strcmp(argv[1], "killed") == 0;
    if (failures == 0 && size > 1 && killed) {
      exchange_ring(net, rank, size);
      killed_peer(net, rank);
    }
    if (failures == 0 && size > 1) {
      exchange_ring(net, rank, size);
      hand_over_before_receive(net, rank, size);
      refuse_bad_arguments(net, rank, size);
      const NetTraffic traffic = net_traffic();
      expect(traffic.sent_bytes > 0 && traffic.sent_bytes == traffic.received_bytes, "traffic counted");
      MPI_Barrier(MPI_COMM_WORLD);
      time_out(net, rank, size);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && all_failures == 0) std::printf("No Errors\n");
  MPI_Finalize();
  return all_failures == 0 ? 0 : 1;
}
