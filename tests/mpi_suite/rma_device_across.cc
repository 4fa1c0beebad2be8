// ferry_win_device_handle on a device window whose ranks are on different
// machines (virtual nodes of FERRY_SUITE_RANKS_PER_NODE ranks): the handle
// maps the memory of this machine's ranks (stores through it land there)
// and carries a GDA queue to every rank. This rank then
// drives the queue as a kernel would (on the emulated device the
// producers are host threads): puts with signal adds to every other rank,
// one element (p), 64-bit atomic adds to rank 0, a barrier's arrivals into
// every sync block; after quiet and MPI_Barrier every rank finds the data
// in its device memory and gets back what it put elsewhere, and after a fence the real MPI's window serves it
// to MPI_Get. Fetch-adds and compare-and-swaps at rank 0, 4-byte reads and
// flagged messages to the next rank return and land as the device API's
// g, fetch_add, compare_swap and ll::put expect. Last, a put past a rank's window fails this rank's queue
// (quiet returns) and touches nothing there. Run by virtual_node.sh.
//
// With the argument peer_dies (killed_peer_test.sh, the launcher told to
// keep the job): the last rank kills itself once every rank has its handle;
// rank 0 queues puts to it until its queue fails (quiet returns), and then
// MPI_Win_fence returns an error naming the lost peer, all within 10 s.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/device_handle.h"
#include "ferry/gda_ring.h"
#include "suite.h"

namespace {

using namespace suite;
namespace gda = ferry::gda;

using HandleFunction = int (*)(MPI_Win, ferry_window_device_t*);

constexpr std::size_t kSignals = 64;  // signal words from each rank, then rank 0's atomic word
constexpr std::size_t kAtomicWord = 8 * 63;
constexpr std::size_t kPart = 5000;  // each source's part of every window
constexpr int kRounds = 7;
// Signal words 60 and 61 of rank 0: fetch-adds, compare-and-swaps.
constexpr std::size_t kFetchWord = 8 * 60;
constexpr std::size_t kLockWord = 8 * 61;
// Flagged messages, past every round's puts in the source's part.
constexpr std::size_t kMessageBytes = 37;
constexpr std::uint32_t kFlag = 0xfeed0005;

std::size_t put_bytes(int round) { return 1 + static_cast<std::size_t>(round) * 611; }  // 1 .. 3667
std::size_t put_offset(int source, int round) { return kSignals * 8 + source * kPart + 1 + 3 * round; }

// Ranks of one virtual node (virtual_node.sh) map each other's memory.
bool same_node(int a, int b) {
  const char* per_node = std::getenv("FERRY_SUITE_RANKS_PER_NODE");
  const int ranks_per_node = per_node ? std::atoi(per_node) : 2;
  return a / ranks_per_node == b / ranks_per_node;
}
constexpr std::uint64_t kStoredMark = 0x5703ed0000000000ull;  // stored through a mapping, + the storing rank

std::size_t message_offset(int source) { return kSignals * 8 + source * kPart + 4000; }

std::vector<char> pattern(int source, int target, int round, std::size_t bytes) {
  std::vector<char> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(source * 59 + target * 17 + round * 5 + i * 11);
  return data;
}

gda::GdaDescriptor descriptor(gda::GdaOp op, const ferry_window_device_t& h, int target) {
  gda::GdaDescriptor d{};
  d.op = static_cast<std::uint8_t>(op);
  d.window = h.gda_window;
  d.target = target;
  d.producer = static_cast<std::uint32_t>(h.rank);
  return d;
}

// The operations that return a value, posted as a kernel's g, fetch_add and
// compare_swap would, and ll::put's flagged put: fetch-adds to rank 0 from
// every rank return distinct old values; one compare-and-swap wins; a read
// of 4 bytes returns what this rank put at the next rank; a flagged message
// arrives as flagged words. base: this rank's window memory.
void fetching_operations(const ferry_window_device_t& h, const gda::GdaRing& ring, const void* base) {
  const int me = h.rank, ranks = h.size, after = (me + 1) % ranks;
  Case what{"fetching operations across machines", "MPI_BYTE"};
  auto value_op = [&](gda::GdaOp op, int target, std::uint64_t offset, std::uint64_t value, std::uint64_t compare,
                      std::uint64_t bytes) {
    gda::GdaDescriptor d = descriptor(op, h, target);
    d.offset = offset;
    d.value = value;
    d.signal_offset = compare;  // a compare-and-swap's compare operand
    d.bytes = bytes;
    std::uint64_t result = 0;
    expect(gda::take_result(ring, gda::post(ring, d), &result), what, "the queue failed");
    return result;
  };
  constexpr int kFetches = 5;
  std::vector<unsigned long long> olds;
  for (int i = 0; i < kFetches; ++i) olds.push_back(value_op(gda::GdaOp::kFetchAdd, 0, kFetchWord, 1, 0, 0));
  olds.push_back(value_op(gda::GdaOp::kCompareSwap, 0, kLockWord, me + 1, 0, 8));
  std::vector<unsigned long long> all(olds.size() * ranks);
  MPI_Allgather(olds.data(), olds.size(), MPI_UNSIGNED_LONG_LONG, all.data(), olds.size(), MPI_UNSIGNED_LONG_LONG,
                MPI_COMM_WORLD);
  std::vector<int> times(kFetches * ranks, 0);
  int winners = 0;
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i < kFetches; ++i) {
      const unsigned long long old = all[r * olds.size() + i];
      expect(old < times.size() && ++times[old] == 1, what, "fetch-add returned " + std::to_string(old));
    }
    winners += all[r * olds.size() + kFetches] == 0;
  }
  expect(winners == 1, what, std::to_string(winners) + " compare-and-swaps won, expected one");

  const std::vector<char> last = pattern(me, after, kRounds - 1, put_bytes(kRounds - 1));
  std::uint32_t four = 0;
  std::memcpy(&four, last.data() + 5, 4);
  expect(value_op(gda::GdaOp::kGetValue, after, put_offset(me, kRounds - 1) + 5, 0, 0, 4) == four, what,
         "a 4-byte read from rank " + std::to_string(after));

  const std::vector<char> message = pattern(me, after, 99, kMessageBytes);
  gda::GdaDescriptor flagged = descriptor(gda::GdaOp::kPutFlagged, h, after);
  flagged.source = reinterpret_cast<std::uintptr_t>(message.data());
  flagged.offset = message_offset(me);
  flagged.bytes = message.size();
  flagged.value = kFlag;
  expect(gda::wait_completed(ring, gda::post(ring, flagged)), what, "a flagged put did not complete");
  MPI_Barrier(MPI_COMM_WORLD);
  const int before = (me + ranks - 1) % ranks;
  const std::vector<char> sent = pattern(before, me, 99, kMessageBytes);
  std::vector<char> words((kMessageBytes + 3) / 4 * 8);
  suite_memcpy(words.data(), static_cast<const char*>(base) + message_offset(before), words.size());
  bool flagged_ok = true;
  for (std::size_t i = 0; i < words.size() / 8; ++i) {
    std::uint32_t word[2] = {0, 0}, data = 0;
    std::memcpy(word, words.data() + 8 * i, 8);
    std::memcpy(&data, sent.data() + 4 * i, std::min<std::size_t>(4, sent.size() - 4 * i));
    flagged_ok = flagged_ok && word[0] == data && word[1] == kFlag;
  }
  expect(flagged_ok, what, "the flagged message from rank " + std::to_string(before));
}

void across(HandleFunction get_handle) {
  const int me = world_rank(), ranks = world_size();
  Case what{"ferry_win_device_handle across machines", "MPI_BYTE"};
  const MPI_Aint bytes = kSignals * 8 + ranks * kPart;
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  void* base = nullptr;
  MPI_Win win;
  check_mpi(MPI_Win_allocate(bytes, 1, info, MPI_COMM_WORLD, &base, &win), what);
  MPI_Info_free(&info);
  const std::vector<char> zeros(bytes, 0);
  suite_memcpy(base, zeros.data(), bytes);
  MPI_Barrier(MPI_COMM_WORLD);

  ferry_window_device_t h{};
  check_mpi(get_handle(win, &h), what);
  expect(h.rank == me && h.size == ranks && h.bytes == static_cast<unsigned long long>(bytes), what,
         "handle says rank " + std::to_string(h.rank) + " of " + std::to_string(h.size));
  expect(h.gda_ring != nullptr, what, "no GDA queue for the other machines");
  if (h.gda_ring == nullptr) {
    MPI_Win_free(&win);
    return;
  }
  std::vector<void*> peers(ranks), sync(ranks);
  suite_memcpy(peers.data(), h.peers, ranks * sizeof(void*));
  suite_memcpy(sync.data(), h.sync, ranks * sizeof(void*));
  for (int r = 0; r < ranks; ++r) {
    const std::string which = "rank " + std::to_string(r) + (same_node(r, me) ? " (this machine)" : " (another machine)");
    expect((peers[r] != nullptr) == same_node(r, me), what, which + ": window memory mapped here or not");
    expect((sync[r] != nullptr) == same_node(r, me), what, which + ": sync block mapped here or not");
  }
  // Stores through the mapping to the ranks of this machine.
  for (int r = 0; r < ranks; ++r)
    if (r != me && peers[r] != nullptr) {
      const std::uint64_t stored = kStoredMark + me;
      suite_memcpy(static_cast<char*>(peers[r]) + put_offset(me, 0) + kPart - 16, &stored, 8);
    }
  gda::GdaRing ring{};
  suite_memcpy(&ring, h.gda_ring, sizeof ring);

  // Puts with signal adds to every other rank, p, atomic adds, a barrier's arrivals.
  std::vector<std::vector<char>> sources;
  sources.reserve(kRounds * ranks);
  for (int round = 0; round < kRounds; ++round)
    for (int target = 0; target < ranks; ++target) {
      if (target == me) continue;
      sources.push_back(pattern(me, target, round, put_bytes(round)));
      gda::GdaDescriptor d = descriptor(gda::GdaOp::kPutSignal, h, target);
      d.source = reinterpret_cast<std::uintptr_t>(sources.back().data());
      d.offset = put_offset(me, round);
      d.bytes = sources.back().size();
      d.signal_op = static_cast<std::uint8_t>(gda::GdaSignalOp::kAdd);
      d.signal_offset = 8 * me;
      d.value = 1;
      expect(gda::post(ring, d) != gda::kRingFailed, what, "a put was refused by the queue");
    }
  for (int target = 0; target < ranks; ++target) {
    if (target == me) continue;
    gda::GdaDescriptor p = descriptor(gda::GdaOp::kPutInline, h, target);
    p.offset = put_offset(me, 0) + kPart - 8;  // the last 8 bytes of this rank's part there
    p.bytes = 4;
    p.value = 0x0a0b0c0d00000000ull | static_cast<unsigned>(me + 1);
    gda::post(ring, p);
    gda::GdaDescriptor arrive = descriptor(gda::GdaOp::kAtomicAdd, h, target);
    arrive.window = h.gda_sync_window;
    arrive.value = 1;
    gda::post(ring, arrive);
  }
  if (me != 0)
    for (int i = 0; i < 10; ++i) {
      gda::GdaDescriptor add = descriptor(gda::GdaOp::kAtomicAdd, h, 0);
      add.offset = kAtomicWord;
      add.value = me;
      gda::post(ring, add);
    }
  expect(gda::wait_all_completed(ring), what, "quiet: the queue failed");
  MPI_Barrier(MPI_COMM_WORLD);

  // What the others put here is in this rank's device memory.
  std::vector<char> mine(bytes);
  suite_memcpy(mine.data(), base, bytes);
  auto word_at = [&](const std::vector<char>& memory, std::size_t offset) {
    unsigned long long word = 0;
    std::memcpy(&word, memory.data() + offset, 8);
    return word;
  };
  for (int source = 0; source < ranks; ++source) {
    if (source == me) continue;
    const std::string from = "from rank " + std::to_string(source);
    expect(word_at(mine, 8 * source) == kRounds, what, from + ": signal word " + std::to_string(word_at(mine, 8 * source)));
    std::vector<char> expected(kPart, 0);
    for (int round = 0; round < kRounds; ++round) {
      const std::vector<char> data = pattern(source, me, round, put_bytes(round));
      std::memcpy(expected.data() + (put_offset(source, round) - put_offset(source, 0)), data.data(), data.size());
    }
    const unsigned p_value = static_cast<unsigned>(source + 1);
    std::memcpy(expected.data() + kPart - 8, &p_value, 4);
    if (same_node(source, me)) {
      const std::uint64_t stored = kStoredMark + source;
      std::memcpy(expected.data() + kPart - 16, &stored, 8);
    }
    expect(std::memcmp(mine.data() + put_offset(source, 0), expected.data(), kPart - 4) == 0, what, from + ": data");
  }
  if (me == 0) {
    const unsigned long long sum = 10ull * (ranks - 1) * ranks / 2;
    expect(word_at(mine, kAtomicWord) == sum, what, "atomic adds: " + std::to_string(word_at(mine, kAtomicWord)));
  }
  std::vector<unsigned long long> sync_words(FERRY_DEVICE_SYNC_WORDS);
  suite_memcpy(sync_words.data(), sync[me], sizeof(unsigned long long) * sync_words.size());
  expect(sync_words[0] == static_cast<unsigned long long>(ranks - 1), what,
         "barrier arrivals in this rank's sync block: " + std::to_string(sync_words[0]));

  // Gets read back what this rank put into the next rank's window.
  const int after = (me + 1) % ranks;
  std::vector<char> got(put_bytes(kRounds - 1), 0);
  gda::GdaDescriptor get = descriptor(gda::GdaOp::kGet, h, after);
  get.source = reinterpret_cast<std::uintptr_t>(got.data());  // the destination
  get.offset = put_offset(me, kRounds - 1);
  get.bytes = got.size();
  const std::uint64_t ticket = gda::post(ring, get);
  expect(ticket != gda::kRingFailed && gda::wait_completed(ring, ticket), what, "a get did not complete");
  expect(got == pattern(me, after, kRounds - 1, got.size()), what, "a get from rank " + std::to_string(after));
  fetching_operations(h, ring, base);

  // The real MPI's window serves the same bytes once the window is synchronized.
  check_mpi(MPI_Win_fence(0, win), what);
  const int next = (me + 1) % ranks;
  std::vector<char> fetched(kPart - 8, 0);
  check_mpi(MPI_Get(fetched.data(), kPart - 8, MPI_BYTE, next, put_offset(me, 0), kPart - 8, MPI_BYTE, win), what);
  check_mpi(MPI_Win_fence(0, win), what);
  const std::vector<char> last = pattern(me, next, kRounds - 1, put_bytes(kRounds - 1));
  expect(std::memcmp(fetched.data() + 3 * (kRounds - 1), last.data(), last.size()) == 0, what,
         "MPI_Get from rank " + std::to_string(next) + " does not see this rank's puts");

  // A put past the next rank's window: this rank's queue fails, quiet
  // returns, the target is untouched.
  if (me == 0) {
    std::vector<char> data(100, 'x');
    gda::GdaDescriptor d = descriptor(gda::GdaOp::kPut, h, next);
    d.source = reinterpret_cast<std::uintptr_t>(data.data());
    d.offset = bytes - 50;
    d.bytes = data.size();
    gda::post(ring, d);
    expect(!gda::wait_all_completed(ring), what, "a put past the window's end completed");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1 % ranks) {
    std::vector<char> now(bytes);
    suite_memcpy(now.data(), base, bytes);
    expect(std::memcmp(now.data() + bytes - 50, mine.data() + bytes - 50, 50) == 0, what,
           "the refused put changed the window");
  }
  MPI_Win_free(&win);
}

void peer_dies(HandleFunction get_handle) {
  const int me = world_rank(), last = world_size() - 1;
  Case what{"a peer of a window across machines dies", "MPI_BYTE"};
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  void* base = nullptr;
  MPI_Win win;
  check_mpi(MPI_Win_allocate(4096, 1, info, MPI_COMM_WORLD, &base, &win), what);
  MPI_Info_free(&info);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  ferry_window_device_t h{};
  check_mpi(get_handle(win, &h), what);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == last) raise(SIGKILL);
  if (me != 0) {
    pause();
    _exit(0);
  }
  gda::GdaRing ring{};
  suite_memcpy(&ring, h.gda_ring, sizeof ring);
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::vector<char> data(1000, 'x');
  bool failed = false;
  while (!failed && seconds() < 10) {
    gda::GdaDescriptor d = descriptor(gda::GdaOp::kPut, h, last);
    d.source = reinterpret_cast<std::uintptr_t>(data.data());
    d.bytes = data.size();
    const std::uint64_t ticket = gda::post(ring, d);
    failed = ticket == gda::kRingFailed || !gda::wait_completed(ring, ticket);
  }
  const int rc = MPI_Win_fence(0, win);
  char text[MPI_MAX_ERROR_STRING] = "";
  int length = 0, error_class = MPI_SUCCESS;
  MPI_Error_class(rc, &error_class);
  MPI_Error_string(rc, text, &length);
  std::printf("rank 0: MPI_Win_fence returned class %d after %.1f s: %s\n", error_class, seconds(), text);
  std::printf(failed && rc != MPI_SUCCESS && seconds() < 10 ? "No Errors\n" : "FAIL: no error within 10 s\n");
  std::fflush(stdout);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  auto get_handle = reinterpret_cast<HandleFunction>(dlsym(RTLD_DEFAULT, "ferry_win_device_handle"));
  if (get_handle && argc > 1 && std::strcmp(argv[1], "peer_dies") == 0) {
    peer_dies(get_handle);
  } else if (get_handle) {
    across(get_handle);
  } else {
    expect(suite_ferry_backend() == nullptr, Case{"ferry_win_device_handle", ""},
           "libferry.so is loaded but does not export ferry_win_device_handle");
  }
  return finish();
}
