#include "mpi_shim/peer_pt2pt.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/collectives/collectives.h"
#include "engine/collectives/communicator.h"
#include "engine/common/liveness.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/common/process_memory.h"
#include "engine/core/locality.h"
#include "engine/transport/p2p.h"
#include "handlers.h"
#include "mpi_shim/host_bounce.h"
#include "mpi_shim/requests.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::peer {

std::atomic<bool> g_active{false};

namespace {

// Tags on the control communicator: envelopes, then one reply tag per send
// in flight (a bounce buffer's acknowledgement comes back on it; a
// withdrawn offer's bounce envelope goes out on it).
constexpr int kEnvelopeTag = 1;
constexpr int kFirstReplyTag = 2;

// kHostBounce: a withdrawn offer's data in a host bounce buffer of the
// sender's (host_bounce.h), named by buffer.pid, claim_nonce and
// buffer.allocation_id.
enum class EnvelopeKind : std::int32_t { kEmpty = 1, kPeerMemory = 2, kHostBounce = 3 };
enum Reply : std::int32_t { kCopied = 1, kFailed = 2 };

struct Envelope {
  std::uint64_t comm_id;
  std::int32_t tag;
  EnvelopeKind kind;
  std::uint64_t bytes;
  std::int32_t reply_tag;
  // The bounce buffer is filled chunk by chunk: chunk k is there once the
  // word at its start reads first_chunk + k or later. 0: filled already.
  std::uint32_t first_chunk;
  std::uint64_t chunk_bytes;
  // An offer of the send buffer itself (buffer names it, not a bounce
  // buffer): the receive that claims the word at claim_slot of the sender's
  // claims segment copies straight from it; if the sender withdrew first,
  // an envelope of a bounce buffer follows on reply_tag. -1: no offer.
  std::int32_t claim_slot;
  std::int32_t claim_pid;
  std::uint64_t claim_nonce;
  std::uint64_t claim_ticket;  // this offer's, in the word's upper half
  // Nonzero: the receive that claims the offer says so on the answers
  // communicator, with reply_tag, once it has copied the buffer (a
  // nonblocking send's request is the receive of that word).
  std::uint32_t reply_when_copied;
  // The memfd, in the sending process, of the shared memory this envelope
  // names: its claims segment (an offer) or its host bounce buffer
  // (kHostBounce).
  std::int32_t segment_fd;
  ExportedBuffer buffer;  // kPeerMemory; kHostBounce names its segment
};
static_assert(sizeof(Envelope) == 184, "Envelope travels between processes; keep its layout fixed");

// A claim word (host shared memory, one per offer in flight): the offer's
// ticket, so a late receive cannot take a later offer in the same word,
// and its state. kPushWanted: the receive asks the sender to copy into the
// buffer named by the slot's PushRequest; kPushing: the sender copies;
// kPushed: it has; kPushRefused: it could not, the receive copies. Only the
// receive writes kClaimDone, after which the sender may reuse the word.
enum Claim : std::uint64_t {
  kOffered = 1,
  kClaimed = 2,
  kClaimDone = 3,
  kWithdrawn = 4,
  kPushWanted = 5,
  kPushing = 6,
  kPushRefused = 7,
  kPushed = 8,
};
constexpr int kClaimSlots = 4096;
constexpr std::uint64_t claim_word(std::uint64_t ticket, Claim state) { return ticket << 8 | state; }

// Where the receive of an offer asks its sender to copy (kPushWanted): one
// per claim word, after the words in the claims segment.
struct PushRequest {
  ExportedBuffer destination;
  std::uint64_t bytes;
  std::uint64_t ticket;  // the offer's
};
constexpr std::size_t kClaimsBytes = kClaimSlots * (sizeof(std::uint64_t) + sizeof(PushRequest));

// A bounce buffer: a page for the word that says how far it is filled,
// then the data (whole 2 MiB pages, which copy engines fill fastest).
constexpr std::size_t kBounceHeader = std::size_t{2} << 20;

struct CommEntry {
  std::uint64_t id = 0;
  std::vector<int> world;     // by rank in the communicator
  std::vector<char> on_host;  // another process of this machine
  bool any_on_host = false;
  std::uint64_t constructions = 0;
  std::map<std::pair<std::uint64_t, int>, std::uint64_t> group_constructions;  // (group, tag)
};

// What a call needs to know about one rank of a communicator.
struct PeerRank {
  std::uint64_t comm_id;
  int world;
};

// Device memory a send's data is copied to, so the send completes at once
// (the receive copies it out whenever it completes, as MPI's progress rule
// needs) and the user may reuse the buffer.
struct Bounce {
  void* ptr;          // the header page; data after kBounceHeader
  std::size_t bytes;  // of data
  gpu::Backend* backend;
  int device;
  bool busy;
  std::int32_t reply = 0;       // the acknowledgement lands here
  std::uint32_t chunks = 0;     // the header word's last value
  gpu::Event filled = nullptr;  // recorded after the last copy into it
  bool retired = false;         // a receive gave up waiting on it: not reused

  std::uint32_t* word() const { return static_cast<std::uint32_t*>(ptr); }
  void* data() const { return static_cast<char*>(ptr) + kBounceHeader; }
};

// A send whose receive has not acknowledged it yet: its data in a device
// bounce buffer or a host one.
struct SendInFlight {
  MPI_Request reply;
  Bounce* bounce;
  HostBounce* host = nullptr;
};

struct PendingOffer;
struct PersistentSend;

struct State {
  // Messages to a receiver: envelopes, and a withdrawn offer's bounce
  // envelope (on its reply tag).
  MPI_Comm control = MPI_COMM_NULL;
  // Messages back to a sender, on the reply tag of its send: a bounce
  // buffer's acknowledgement, a claimed nonblocking offer's word that its
  // buffer is copied; and a sender's word to itself that ends an offer it
  // withdrew. Apart from control, since both ranks of a pair draw reply tags
  // from counters of their own: a message back must never match a receive
  // of a message to this rank.
  MPI_Comm answers = MPI_COMM_NULL;
  int tag_ub = 32767;
  std::atomic<std::uint32_t> replies{0};
  std::mutex comms_mutex;
  std::unordered_map<MPI_Comm, CommEntry> comms;
  // Changes whenever comms does, so a thread may keep its last answer.
  std::atomic<std::uint64_t> comms_generation{0};
  std::vector<std::uint64_t> host_of;  // by world rank
  // By world rank: when an offer to that rank was last seen claimed (steady
  // clock, ns). A receive busy claiming a sender's offers keeps the others'
  // windows open.
  std::unique_ptr<std::atomic<std::int64_t>[]> claimed_at;
  int world_rank = 0;
  std::mutex envelopes_mutex;
  std::unordered_map<int, std::deque<Envelope>> envelopes;  // by world rank of the sender
  PeerMemory memory{true};
  std::mutex bounce_mutex;
  std::vector<std::unique_ptr<Bounce>> bounces;
  std::vector<SendInFlight> in_flight;
  std::unique_ptr<HostBounces> host_bounces;  // made at first use
  PeerHostBounces peer_host_bounces;
  // Streams of the sends' copies into bounce buffers and of the receives'
  // copies out of them, by backend and device (-1: a host receive buffer).
  std::mutex streams_mutex;
  std::map<std::pair<gpu::Backend*, int>, gpu::Stream> send_streams, receive_streams;
  // Offers: this process's claims segment and its free words, and the
  // peers' segments mapped here, by (process, nonce).
  std::mutex claims_mutex;
  std::atomic<std::uint64_t>* claims = nullptr;
  PushRequest* push_requests = nullptr;  // after the claim words
  std::uint64_t tickets = 0;
  bool claims_failed = false;
  int claims_fd = -1;  // its memfd
  std::uint64_t claims_nonce = 0;
  std::vector<int> free_claims;
  std::map<std::pair<int, std::uint64_t>, std::atomic<std::uint64_t>*> peer_claims;
  // Nonblocking offers by the request the user holds.
  std::mutex offers_mutex;
  // Shared with the completion that finishes each one: once the real MPI has
  // freed its handle, another thread's new offer may take the handle's entry.
  std::unordered_map<MPI_Request, std::shared_ptr<PendingOffer>> offers;
  std::atomic<int> live_offers{0};
  std::unordered_map<MPI_Request, std::unique_ptr<PersistentSend>> persistent_sends;
  std::atomic<int> live_persistent_sends{0};
  std::atomic<std::uint64_t> straight_blocking{0}, straight_nonblocking{0}, bounced{0}, host_bounced{0}, pushed{0};
};

State& state() {
  static auto* s = new State;
  return *s;
}

// The stream of this kind for backend and device, made at first use.
gpu::Stream stream_for(std::map<std::pair<gpu::Backend*, int>, gpu::Stream>& streams, gpu::Backend* backend,
                       int device) {
  std::lock_guard<std::mutex> lock(state().streams_mutex);
  gpu::Stream& stream = streams[{backend, device}];
  if (!stream && (device < 0 || ok(backend->set_device(device))) && !ok(backend->stream_create(&stream)))
    stream = nullptr;
  return stream;
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool wanted_here() {
  if (params().pt2pt != "peer" || forced_route() != ForcedRoute::kAuto) return false;
  std::vector<std::string> unknown;
  return allowed_transports(params().transports, params().p2p_disable, params().shm_disable, &unknown).p2p;
}

// Registers comm under id; call with comms_mutex held.
void register_locked(MPI_Comm comm, std::uint64_t id) {
  State& s = state();
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  int size = 0;
  if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || PMPI_Comm_group(comm, &group) != MPI_SUCCESS) return;
  PMPI_Comm_group(MPI_COMM_WORLD, &world_group);
  CommEntry entry;
  entry.id = id;
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  entry.world.assign(size, MPI_UNDEFINED);
  PMPI_Group_translate_ranks(group, size, ranks.data(), world_group, entry.world.data());
  PMPI_Group_free(&group);
  PMPI_Group_free(&world_group);
  entry.on_host.assign(size, 0);
  for (int r = 0; r < size; ++r) {
    const int w = entry.world[r];
    // A rank outside MPI_COMM_WORLD (a spawned process) is never a peer.
    if (w == MPI_UNDEFINED || w == s.world_rank) continue;
    entry.on_host[r] = s.host_of[w] == s.host_of[s.world_rank];
    entry.any_on_host = entry.any_on_host || entry.on_host[r];
  }
  s.comms[comm] = std::move(entry);
  s.comms_generation.fetch_add(1, std::memory_order_release);
}

std::string claims_segment_name(std::uint64_t nonce) { return "ferry-claims-" + std::to_string(nonce); }

// The claims segment behind fd, mapped; nullptr if it cannot be.
std::atomic<std::uint64_t>* map_claims(int fd) {
  if (fd < 0 || process_memory_bytes(fd) < kClaimsBytes) return nullptr;
  void* view = mmap(nullptr, kClaimsBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return view == MAP_FAILED ? nullptr : static_cast<std::atomic<std::uint64_t>*>(view);
}

// A free word of this process's claims segment (made at first use), or -1,
// and a new ticket.
int take_claim(std::uint64_t* ticket) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.claims_mutex);
  if (!s.claims && !s.claims_failed) {
    s.claims_nonce = mix(static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()),
                         static_cast<std::uint64_t>(s.world_rank));
    s.claims_fd = create_process_memory(claims_segment_name(s.claims_nonce), kClaimsBytes, true);
    s.claims = map_claims(s.claims_fd);
    s.claims_failed = s.claims == nullptr;
    if (s.claims) s.push_requests = reinterpret_cast<PushRequest*>(s.claims + kClaimSlots);
    for (int slot = kClaimSlots - 1; s.claims && slot >= 0; --slot) s.free_claims.push_back(slot);
  }
  if (s.free_claims.empty()) return -1;
  *ticket = ++s.tickets;
  const int slot = s.free_claims.back();
  s.free_claims.pop_back();
  return slot;
}

void give_claim(int slot) {
  std::lock_guard<std::mutex> lock(state().claims_mutex);
  state().free_claims.push_back(slot);
}

// A new ticket for a claim word held already.
std::uint64_t next_ticket() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.claims_mutex);
  return ++s.tickets;
}

// The word of an offer from another process, its segment mapped at first
// use; nullptr if it cannot be.
std::atomic<std::uint64_t>* peer_claim(const Envelope& env) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.claims_mutex);
  auto& words = s.peer_claims[{env.claim_pid, env.claim_nonce}];
  if (!words) {
    const int fd = open_process_memory(env.claim_pid, env.segment_fd, claims_segment_name(env.claim_nonce), O_RDWR);
    words = map_claims(fd);
    if (fd >= 0) close(fd);
  }
  return words && env.claim_slot >= 0 && env.claim_slot < kClaimSlots ? words + env.claim_slot : nullptr;
}

// The push request of an offer from another process (its claims segment is
// mapped by peer_claim).
PushRequest* peer_push_request(const Envelope& env) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.claims_mutex);
  auto it = s.peer_claims.find({env.claim_pid, env.claim_nonce});
  if (it == s.peer_claims.end() || !it->second) return nullptr;
  return reinterpret_cast<PushRequest*>(it->second + kClaimSlots) + env.claim_slot;
}

// rank of comm when it is a known communicator and rank another process of
// this machine.
bool peer_rank(MPI_Comm comm, int rank, PeerRank* out) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.comms_mutex);
  auto it = s.comms.find(comm);
  if (it == s.comms.end() || rank < 0 || rank >= static_cast<int>(it->second.world.size()) || !it->second.on_host[rank])
    return false;
  *out = PeerRank{it->second.id, it->second.world[rank]};
  return true;
}

std::int64_t message_bytes(int count, MPI_Datatype type) {
  int size = 0;
  if (count < 0 || PMPI_Type_size(type, &size) != MPI_SUCCESS) return -1;
  return static_cast<std::int64_t>(count) * size;
}

bool valid_tag(int tag) { return tag >= 0 && tag <= state().tag_ub; }

// Whether count × type lies in memory exactly as its packed bytes do: a
// predefined type, or contiguous ones of it, without gaps or reordering.
bool packed_layout(MPI_Datatype type) {
  int integers = 0, addresses = 0, types = 0, combiner = MPI_UNDEFINED;
  if (PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner) != MPI_SUCCESS) return false;
  if (combiner == MPI_COMBINER_NAMED) return true;
  if ((combiner != MPI_COMBINER_CONTIGUOUS && combiner != MPI_COMBINER_DUP) || types != 1) return false;
  std::vector<int> ints(integers);
  std::vector<MPI_Aint> addrs(addresses);
  MPI_Datatype inner = MPI_DATATYPE_NULL;
  if (PMPI_Type_get_contents(type, integers, addresses, types, ints.data(), addrs.data(), &inner) != MPI_SUCCESS)
    return false;
  const bool packed = packed_layout(inner);
  // A derived type that get_contents returns is the caller's to free.
  int inner_integers = 0, inner_addresses = 0, inner_types = 0, inner_combiner = MPI_UNDEFINED;
  PMPI_Type_get_envelope(inner, &inner_integers, &inner_addresses, &inner_types, &inner_combiner);
  if (inner_combiner != MPI_COMBINER_NAMED) PMPI_Type_free(&inner);
  if (!packed) return false;
  MPI_Aint lb = 0, extent = 0;
  int size = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  PMPI_Type_size(type, &size);
  return lb == 0 && extent == size;
}

// The envelope the sender sent with the message of (comm_id, tag) that the
// real MPI matched: the first one queued, receiving more from the sender
// until it is there (it was sent before the message). peek leaves it queued.
// Envelopes are received only under the lock, in the order they came, and
// never by a blocking receive: another thread may queue the one this
// thread waits for (MPI_THREAD_MULTIPLE).
int find_envelope(int world, std::uint64_t comm_id, int tag, bool peek, Envelope* out) {
  State& s = state();
  const auto gives_up = handshake_deadline();
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(s.envelopes_mutex);
      std::deque<Envelope>& queue = s.envelopes[world];
      for (auto it = queue.begin(); it != queue.end(); ++it) {
        if (it->comm_id != comm_id || it->tag != tag) continue;
        *out = *it;
        if (!peek) queue.erase(it);
        return MPI_SUCCESS;
      }
      int arrived = 0;
      int rc = PMPI_Iprobe(world, kEnvelopeTag, s.control, &arrived, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS && arrived) {
        Envelope next;
        rc = PMPI_Recv(&next, sizeof(next), MPI_BYTE, world, kEnvelopeTag, s.control, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS) queue.push_back(next);
      }
      if (rc != MPI_SUCCESS) return rc;
      if (arrived) continue;
    }
    if (std::chrono::steady_clock::now() > gives_up) {
      FERRY_WARN(Shim,
                 "the envelope of a device message from world rank %d did not come within "
                 "FERRY_HANDSHAKE_TIMEOUT",
                 world);
      return MPI_ERR_OTHER;
    }
    if (polls > 1024) std::this_thread::yield();
  }
}

int next_reply_tag() {
  State& s = state();
  const std::uint32_t span = static_cast<std::uint32_t>(s.tag_ub - kFirstReplyTag + 1);
  return kFirstReplyTag + static_cast<int>(s.replies.fetch_add(1, std::memory_order_relaxed) % span);
}

gpu::Backend* backend_of(gpu::BackendKind kind) { return gpu::owner_backend({gpu::MemoryKind::kDevice, kind}); }

// Copies the first length bytes of a message out of its bounce buffer,
// mapped at bounce, to dst (any memory): chunk by chunk on a stream that
// waits for the sender's copies. Bounded by FERRY_HANDSHAKE_TIMEOUT: then
// the bounce buffer's word is raised past every chunk, so the stream
// drains, and the sender retires the buffer (kFailed).
Status copy_out(gpu::Backend* backend, const Envelope& env, void* bounce, void* dst, std::size_t length) {
  // An offered send buffer has no header.
  const char* data = static_cast<const char*>(bounce) + (env.claim_slot >= 0 ? 0 : kBounceHeader);
  if (env.first_chunk == 0) return backend->copy(dst, data, length);
  const gpu::PointerInfo where = gpu::classify(dst);
  gpu::Stream stream =
      stream_for(state().receive_streams, backend, where.kind == gpu::MemoryKind::kDevice ? where.device : -1);
  if (!stream) return Status::kUnavailable;
  auto* word = static_cast<std::uint32_t*>(bounce);
  std::uint32_t chunk = env.first_chunk;
  for (std::size_t offset = 0; offset < length; offset += env.chunk_bytes, ++chunk) {
    FERRY_CHECK(backend->stream_wait_value(stream, word, chunk));
    FERRY_CHECK(backend->copy_async(static_cast<char*>(dst) + offset, data + offset,
                                    std::min<std::size_t>(env.chunk_bytes, length - offset), stream));
  }
  const Status copied = wait_streams_until(backend, {stream}, handshake_deadline());
  if (copied != Status::kTimeout) return copied;
  FERRY_WARN(Shim, "a %llu-byte message's sender did not fill its bounce buffer within FERRY_HANDSHAKE_TIMEOUT",
             static_cast<unsigned long long>(env.bytes));
  FERRY_LOG_IF_FAILED(backend->write_value_now(word, chunk + (1u << 30)));
  FERRY_LOG_IF_FAILED(backend->stream_synchronize(stream));
  return Status::kTimeout;
}

// A GPU that runs processes' work in turns (CUDA without MPS) switches
// between them whenever another process's work comes, at a cost far above a
// small copy's. So where a claimed offer's sender and its receive share
// such a GPU and the sender has the lower world rank, the receive asks the
// sender to copy (FERRY_GPU_LEADER): each pair's copies, both ways, are then
// one process's work. source is the sender's buffer, mapped here (claimed:
// it stays the sender's until kClaimDone). kOk: the sender has copied into
// dst; kUnavailable: this receive is to copy after all (no such pair, the
// sender refused or did not answer within FERRY_PT2PT_CLAIM_US, being
// outside MPI), the word claimed again; kTimeout: the sender began and did
// not finish within FERRY_HANDSHAKE_TIMEOUT; kPeerEnded: its process ended.
Status ask_sender_to_copy(const Envelope& env, int world, std::atomic<std::uint64_t>* claim, const void* source,
                          void* dst, std::size_t bytes) {
  State& s = state();
  const std::string& leading = params().gpu_leader;
  if (leading == "off" || world >= s.world_rank || bytes == 0) return Status::kUnavailable;
  const gpu::PointerInfo mine = gpu::classify(dst);
  gpu::Backend* backend = gpu::owner_backend(mine);
  if (!backend || mine.kind != gpu::MemoryKind::kDevice || gpu::classify(source).device != mine.device ||
      (leading != "on" && !backend->processes_take_turns(mine.device)))
    return Status::kUnavailable;
  PushRequest* request = peer_push_request(env);
  if (!request || !ok(s.memory.export_buffer(dst, mine, &request->destination))) return Status::kUnavailable;
  request->bytes = bytes;
  request->ticket = env.claim_ticket;
  const std::uint64_t claimed = claim_word(env.claim_ticket, kClaimed);
  std::uint64_t word = claimed;
  if (!claim->compare_exchange_strong(word, claim_word(env.claim_ticket, kPushWanted), std::memory_order_acq_rel))
    return Status::kUnavailable;
  const auto answer_by = std::chrono::steady_clock::now() + std::chrono::microseconds(params().pt2pt_claim_us);
  const auto gives_up = handshake_deadline();
  for (int polls = 0;; ++polls) {
    word = claim->load(std::memory_order_acquire);
    const auto now = std::chrono::steady_clock::now();
    if (word == claim_word(env.claim_ticket, kPushed)) return Status::kOk;
    if (word == claim_word(env.claim_ticket, kPushRefused)) {
      claim->store(claimed, std::memory_order_release);
      return Status::kUnavailable;
    }
    if (word == claim_word(env.claim_ticket, kPushWanted) && now > answer_by &&
        claim->compare_exchange_strong(word, claimed, std::memory_order_acq_rel))
      return Status::kUnavailable;
    if (now > gives_up) {
      FERRY_WARN(Shim, "rank %d began copying a %zu-byte message and did not finish within FERRY_HANDSHAKE_TIMEOUT",
                 world, bytes);
      return Status::kTimeout;
    }
    if (polls % 65536 == 65535 && !process_alive(env.claim_pid)) {
      FERRY_WARN(Shim, "rank %d (pid %d) ended while it copied a %zu-byte message", world, env.claim_pid, bytes);
      return Status::kPeerEnded;
    }
    if (polls > 1024) std::this_thread::yield();
  }
}

// A message whose envelope says kPeerMemory: claims it if it is an offer,
// then copies it out of the sender's buffer (or bounce buffer, device or
// host), straight into buf when buf is one range in packed order, else
// through host memory and MPI_Pack/MPI_Unpack; tells the sender it is done
// (the claim word, or an acknowledgement that frees the bounce buffer) and
// sets status.
int receive_message(MPI_Comm comm, const Envelope& env, int world, void* buf, int count, MPI_Datatype type,
                    MPI_Status* status) {
  State& s = state();
  Extent extent;
  const std::int64_t capacity = message_bytes(count, type);
  const bool described = capacity >= 0 && extent_of(count, type, &extent);
  const bool dense =
      described && extent.dense && extent.bytes == static_cast<std::size_t>(capacity) && packed_layout(type);
  const std::int64_t delivered = std::min<std::int64_t>(std::max<std::int64_t>(capacity, 0), env.bytes);
  std::atomic<std::uint64_t>* claim = nullptr;
  if (env.claim_slot >= 0) {
    // An offer: claimed, the send buffer is copied from (by the sender,
    // ask_sender_to_copy, where that is better) and the word says when that
    // is done; withdrawn (the sender waited long enough), a bounce buffer's
    // envelope follows.
    claim = peer_claim(env);
    std::uint64_t offered = claim_word(env.claim_ticket, kOffered);
    if (!claim ||
        !claim->compare_exchange_strong(offered, claim_word(env.claim_ticket, kClaimed), std::memory_order_acq_rel)) {
      FERRY_TRACE(Shim, "a %llu-byte offer from rank %d was withdrawn before this receive claimed it",
                  static_cast<unsigned long long>(env.bytes), world);
      Envelope bounced;
      const int rc = PMPI_Recv(&bounced, sizeof(bounced), MPI_BYTE, world, env.reply_tag, s.control, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return rc;
      return receive_message(comm, bounced, world, buf, count, type, status);
    }
  }
  const bool on_host = env.kind == EnvelopeKind::kHostBounce;
  gpu::Backend* backend = on_host ? nullptr : backend_of(env.buffer.handle.owner);
  void* source = nullptr;
  const void* host_source = nullptr;
  Status copied = Status::kUnavailable;
  if (on_host) {
    host_source =
        s.peer_host_bounces.map(env.buffer.pid, env.segment_fd, env.claim_nonce, env.buffer.allocation_id, env.bytes);
    if (host_source) copied = Status::kOk;
  } else if (backend) {
    copied = s.memory.pin_buffer(env.buffer, &source);
  }
  const bool pinned = ok(copied) && !on_host;
  // The first length bytes of the message to dst (any memory).
  auto fetch = [&](void* dst, std::size_t length) {
    return on_host ? gpu::copy(dst, host_source, length) : copy_out(backend, env, source, dst, length);
  };
  int error = MPI_SUCCESS;
  Status pushed = Status::kUnavailable;
  if (ok(copied) && delivered > 0 && dense && claim)
    pushed = ask_sender_to_copy(env, world, claim, source, static_cast<char*>(buf) + extent.lb, delivered);
  if (pushed != Status::kUnavailable) {
    copied = pushed;
    s.pushed.fetch_add(ok(pushed), std::memory_order_relaxed);
  } else if (ok(copied) && delivered > 0 && dense) {
    copied = fetch(static_cast<char*>(buf) + extent.lb, delivered);
  } else if (ok(copied) && delivered > 0) {
    // A type with holes or reordering: the bytes in order on the host, then
    // unpacked into buf (a staged image of it when buf is device memory). The
    // packed form starts as buf's own contents, so a last element that
    // arrived in part keeps the rest of its bytes.
    Staging staging(FunctionId::kRecv, comm);
    void* image = staging.receive(buf, extent, type);
    std::vector<char> packed(static_cast<std::size_t>(capacity));
    int position = 0;
    if (staging.failed()) {
      error = staging.raise();
    } else {
      error = PMPI_Pack(image, count, type, packed.data(), static_cast<int>(capacity), &position, MPI_COMM_SELF);
      if (error == MPI_SUCCESS) copied = fetch(packed.data(), delivered);
      position = 0;
      if (error == MPI_SUCCESS && ok(copied))
        error = PMPI_Unpack(packed.data(), static_cast<int>(capacity), &position, image, count, type, MPI_COMM_SELF);
      MPI_Status unpacked{};
      PMPI_Status_set_elements_x(&unpacked, MPI_BYTE, delivered);
      if (error == MPI_SUCCESS && ok(copied)) staging.received(unpacked);
      error = staging.finish(error);
    }
  }
  if (pinned) s.memory.unpin_buffer(env.buffer);
  // Acknowledged in every case, so the sender's buffer is not held.
  int replied = MPI_SUCCESS;
  if (claim) {
    claim->store(claim_word(env.claim_ticket, kClaimDone), std::memory_order_release);
    if (env.reply_when_copied) replied = PMPI_Send(nullptr, 0, MPI_BYTE, world, env.reply_tag, s.answers);
  } else {
    const std::int32_t reply = copied == Status::kTimeout ? kFailed : kCopied;
    replied = PMPI_Send(&reply, 1, MPI_INT32_T, world, env.reply_tag, s.answers);
  }
  if (!ok(copied)) {
    FERRY_WARN(Shim, "copying a %llu-byte message out of peer memory failed: %s",
               static_cast<unsigned long long>(env.bytes), status_name(copied));
    error = MPI_ERR_OTHER;
  } else if (error == MPI_SUCCESS && replied != MPI_SUCCESS) {
    error = replied;
  } else if (error == MPI_SUCCESS && static_cast<std::int64_t>(env.bytes) > capacity) {
    error = MPI_ERR_TRUNCATE;
  }
  PMPI_Status_set_elements_x(status, MPI_BYTE, ok(copied) ? delivered : 0);
  if (error != MPI_SUCCESS) status->MPI_ERROR = error;
  return error;
}

// Whether a completed receive's status is an empty message from another
// process of this machine on a known communicator: then it has an envelope.
bool empty_from_peer(MPI_Comm comm, const MPI_Status* status, PeerRank* from) {
  if (!active() || status->MPI_SOURCE < 0) return false;
  int cancelled = 0;
  PMPI_Test_cancelled(status, &cancelled);
  int bytes = -1;
  if (cancelled || PMPI_Get_count(status, MPI_BYTE, &bytes) != MPI_SUCCESS || bytes != 0) return false;
  return peer_rank(comm, status->MPI_SOURCE, from);
}

// Queues the copies of bytes at data into the bounce buffer, chunk by chunk,
// each followed by the header word a receive waits for; or, where streams
// cannot write such words, copies it all now. Fills in env's chunk fields.
Status fill_bounce(Bounce& bounce, const void* data, Envelope* env) {
  gpu::Backend* backend = bounce.backend;
  const std::size_t bytes = env->bytes;
  if (!backend->stream_memory_ops()) {
    FERRY_CHECK(backend->copy(bounce.data(), data, bytes));
    env->first_chunk = 0;
    env->chunk_bytes = bytes;
    return backend->event_record(bounce.filled, nullptr);
  }
  gpu::Stream stream = stream_for(state().send_streams, backend, bounce.device);
  if (!stream) return Status::kUnavailable;
  const std::int64_t asked = params().pt2pt_chunk_bytes;
  const std::size_t chunk =
      asked > 0 ? std::max<std::size_t>(static_cast<std::size_t>(asked), 4096) : std::max<std::size_t>(bytes, 1);
  env->first_chunk = bounce.chunks + 1;
  env->chunk_bytes = chunk;
  for (std::size_t offset = 0; offset < bytes; offset += chunk) {
    const std::size_t length = std::min(chunk, bytes - offset);
    FERRY_CHECK(backend->copy_async(static_cast<char*>(bounce.data()) + offset, static_cast<const char*>(data) + offset,
                                    length, stream));
    FERRY_CHECK(backend->stream_write_value(stream, bounce.word(), ++bounce.chunks));
  }
  return backend->event_record(bounce.filled, stream);
}

void free_bounce(Bounce& bounce) {
  if (bounce.filled) FERRY_LOG_IF_FAILED(bounce.backend->event_destroy(bounce.filled));
  FERRY_LOG_IF_FAILED(bounce.backend->device_free(bounce.ptr));
}

// Finishes the sends whose receives acknowledged them: their bounce buffers
// are free again. Call with bounce_mutex held.
void reap_locked(State& s) {
  if (s.in_flight.empty()) return;
  std::vector<MPI_Request> replies;
  replies.reserve(s.in_flight.size());
  for (const SendInFlight& send : s.in_flight) replies.push_back(send.reply);
  std::vector<int> done(replies.size());
  int outcount = 0;
  if (PMPI_Testsome(static_cast<int>(replies.size()), replies.data(), &outcount, done.data(), MPI_STATUSES_IGNORE) !=
          MPI_SUCCESS ||
      outcount == MPI_UNDEFINED)
    return;
  std::vector<bool> finished(replies.size(), false);
  for (int k = 0; k < outcount; ++k) finished[done[k]] = true;
  std::vector<SendInFlight> still;
  for (std::size_t i = 0; i < s.in_flight.size(); ++i) {
    if (finished[i] && s.in_flight[i].host) {
      s.in_flight[i].host->busy = false;
    } else if (finished[i]) {
      Bounce* bounce = s.in_flight[i].bounce;
      bounce->busy = false;
      // Its word was raised past the chunks to come: never used again.
      bounce->retired = bounce->reply == kFailed;
    } else {
      still.push_back(s.in_flight[i]);
    }
  }
  s.in_flight.swap(still);
}

// A free bounce buffer of at least bytes on device, from the pool or new;
// nullptr when FERRY_PT2PT_BOUNCE_BYTES would be exceeded or allocation
// fails. Call with bounce_mutex held.
Bounce* take_bounce_locked(State& s, gpu::Backend* backend, int device, std::size_t bytes) {
  const std::uint64_t limit = static_cast<std::uint64_t>(std::max<std::int64_t>(params().pt2pt_bounce_bytes, 0));
  Bounce* best = nullptr;
  for (const auto& b : s.bounces)
    if (!b->busy && !b->retired && b->backend == backend && b->device == device && b->bytes >= bytes &&
        (!best || b->bytes < best->bytes))
      best = b.get();
  if (!best) {
    const std::size_t rounded = bounce_bytes(bytes);
    std::uint64_t held = 0, idle = 0;
    for (const auto& b : s.bounces) {
      held += b->bytes;
      if (!b->busy) idle += b->bytes;
    }
    // Idle buffers are freed only when that makes room.
    if (held - idle + rounded > limit) {
      FERRY_TRACE(Shim, "no bounce buffer of %zu bytes: %llu in use, FERRY_PT2PT_BOUNCE_BYTES %llu", rounded,
                  static_cast<unsigned long long>(held - idle), static_cast<unsigned long long>(limit));
      return nullptr;
    }
    if (held + rounded > limit) {
      // Largest first.
      std::sort(s.bounces.begin(), s.bounces.end(),
                [](const std::unique_ptr<Bounce>& a, const std::unique_ptr<Bounce>& b) { return a->bytes > b->bytes; });
      for (auto it = s.bounces.begin(); it != s.bounces.end() && held + rounded > limit;) {
        if ((*it)->busy) {
          ++it;
          continue;
        }
        held -= (*it)->bytes;
        FERRY_TRACE(Shim, "bounce buffer of %zu bytes freed to make room for %zu", (*it)->bytes, rounded);
        free_bounce(**it);
        it = s.bounces.erase(it);
      }
    }
    void* ptr = nullptr;
    gpu::Event filled = nullptr;
    if (!ok(backend->set_device(device)) || !ok(backend->device_alloc(kBounceHeader + rounded, &ptr))) return nullptr;
    const std::uint32_t zero = 0;
    if (!ok(backend->copy(ptr, &zero, sizeof(zero))) || !ok(backend->event_create(&filled))) {
      FERRY_LOG_IF_FAILED(backend->device_free(ptr));
      return nullptr;
    }
    FERRY_TRACE(Shim, "bounce buffer of %zu bytes made (%llu held before)", rounded,
                static_cast<unsigned long long>(held));
    s.bounces.push_back(std::make_unique<Bounce>(Bounce{ptr, rounded, backend, device, false}));
    best = s.bounces.back().get();
    best->filled = filled;
  }
  best->busy = true;
  return best;
}
}  // namespace

void start() {
  State& s = state();
  int size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &s.world_rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  if (!wanted_here()) return;
  const std::uint64_t mine[2] = {machine_identity(), 1};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(size));
  if (PMPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD) != MPI_SUCCESS) return;
  s.host_of.resize(size);
  s.claimed_at.reset(new std::atomic<std::int64_t>[size]());
  for (int r = 0; r < size; ++r) s.host_of[r] = all[2 * r];
  if (PMPI_Comm_dup(MPI_COMM_WORLD, &s.control) != MPI_SUCCESS) return;
  PMPI_Comm_set_errhandler(s.control, MPI_ERRORS_RETURN);
  if (PMPI_Comm_dup(MPI_COMM_WORLD, &s.answers) != MPI_SUCCESS) {
    PMPI_Comm_free(&s.control);
    return;
  }
  PMPI_Comm_set_errhandler(s.answers, MPI_ERRORS_RETURN);
  void* tag_ub = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found) == MPI_SUCCESS && found)
    s.tag_ub = *static_cast<int*>(tag_ub);
  {
    std::lock_guard<std::mutex> lock(s.comms_mutex);
    register_locked(MPI_COMM_WORLD, mix(0x46657272795f5750ULL, 1));
  }
  g_active.store(true, std::memory_order_release);
  FERRY_INFO(Init, "point-to-point on device buffers through peer memory (from %lld bytes)",
             static_cast<long long>(params().pt2pt_min_bytes));
}

void stop() {
  if (!active()) return;
  State& s = state();
  {
    // Receives complete before MPI_Finalize in a correct program, so their
    // acknowledgements are here or on the way; a receive never made is
    // given up on after FERRY_HANDSHAKE_TIMEOUT.
    std::lock_guard<std::mutex> lock(s.bounce_mutex);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(params().handshake_timeout);
    while (!s.in_flight.empty() && std::chrono::steady_clock::now() < deadline) {
      reap_locked(s);
      if (!s.in_flight.empty()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    for (SendInFlight& send : s.in_flight) {
      PMPI_Cancel(&send.reply);
      PMPI_Request_free(&send.reply);
    }
    if (!s.in_flight.empty())
      FERRY_WARN(Shim, "%zu device messages were never received; their bounce buffers stay mapped", s.in_flight.size());
    s.in_flight.clear();
    for (auto& b : s.bounces)
      if (!b->busy) free_bounce(*b);
    s.bounces.clear();
    s.host_bounces.reset();
  }
  {
    std::lock_guard<std::mutex> lock(s.claims_mutex);
    for (auto& [owner, words] : s.peer_claims)
      if (words) munmap(words, kClaimsBytes);
    s.peer_claims.clear();
    if (s.claims) munmap(s.claims, kClaimsBytes);
    s.claims = nullptr;
    if (s.claims_fd >= 0) close(s.claims_fd);
    s.claims_fd = -1;
  }
  g_active.store(false, std::memory_order_release);
  PMPI_Comm_free(&s.control);
  PMPI_Comm_free(&s.answers);
  std::lock_guard<std::mutex> lock(s.comms_mutex);
  s.comms.clear();
}

void derived(MPI_Comm parent, MPI_Comm child, std::uint64_t salt) {
  if (!active()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.comms_mutex);
  auto it = s.comms.find(parent);
  if (it == s.comms.end()) return;
  // Every member of parent counts the call, including those left out of it.
  const std::uint64_t id = mix(mix(it->second.id, ++it->second.constructions), salt);
  int inter = 0;
  if (child == MPI_COMM_NULL || PMPI_Comm_test_inter(child, &inter) != MPI_SUCCESS || inter) return;
  register_locked(child, id);
}

void derived_from_group(MPI_Comm parent, MPI_Comm child, int tag) {
  if (!active() || child == MPI_COMM_NULL) return;
  State& s = state();
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  int size = 0;
  PMPI_Comm_group(child, &group);
  PMPI_Group_size(group, &size);
  PMPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(size), world(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  PMPI_Group_translate_ranks(group, size, ranks.data(), world_group, world.data());
  PMPI_Group_free(&group);
  PMPI_Group_free(&world_group);
  std::uint64_t members = 0x67726f7570ULL;
  for (int w : world) members = mix(members, static_cast<std::uint64_t>(w));
  std::lock_guard<std::mutex> lock(s.comms_mutex);
  auto it = s.comms.find(parent);
  if (it == s.comms.end()) return;
  // Only the group's members take part, so they count among themselves.
  const std::uint64_t n = ++it->second.group_constructions[{members, tag}];
  register_locked(child, mix(mix(mix(it->second.id, members), static_cast<std::uint64_t>(tag)), n));
}

void forget(MPI_Comm comm) {
  if (!active()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.comms_mutex);
  s.comms.erase(comm);
  s.comms_generation.fetch_add(1, std::memory_order_release);
}

bool checks_receives(MPI_Comm comm) {
  if (!active()) return false;
  State& s = state();
  // Asked on every receive, most often about the communicator asked last.
  struct LastAnswer {
    MPI_Comm comm = MPI_COMM_NULL;
    std::uint64_t generation = ~std::uint64_t{0};
    bool checks = false;
  };
  thread_local LastAnswer last;
  const std::uint64_t generation = s.comms_generation.load(std::memory_order_acquire);
  if (last.comm == comm && last.generation == generation) return last.checks;
  std::lock_guard<std::mutex> lock(s.comms_mutex);
  auto it = s.comms.find(comm);
  last = LastAnswer{comm, generation, it != s.comms.end() && it->second.any_on_host};
  return last.checks;
}

int before_send(int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, bool* announced) {
  if (announced) *announced = false;
  if (!active() || message_bytes(count, type) != 0 || !valid_tag(tag)) return MPI_SUCCESS;
  PeerRank to;
  if (!peer_rank(comm, dest, &to)) return MPI_SUCCESS;
  if (announced) *announced = true;
  Envelope env{};
  env.comm_id = to.comm_id;
  env.tag = tag;
  env.kind = EnvelopeKind::kEmpty;
  return PMPI_Send(&env, sizeof(env), MPI_BYTE, to.world, kEnvelopeTag, state().control);
}

namespace {

// A send that may go through peer memory, and what send() needs of it.
struct Eligible {
  std::int64_t bytes;
  const void* data;
  gpu::PointerInfo info;
  gpu::Backend* backend;
  PeerRank to;
};

bool eligible(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, Eligible* out) {
  // Cheapest first: host buffers, most of what a program sends, stop here.
  if (!active() || !valid_tag(tag) || !buf) return false;
  const gpu::PointerInfo info = gpu::classify(buf);
  if (info.kind != gpu::MemoryKind::kDevice) return false;
  const std::int64_t bytes = message_bytes(count, type);
  if (bytes <= 0 || bytes < params().pt2pt_min_bytes) return false;
  Extent extent;
  if (!extent_of(count, type, &extent) || !extent.dense || extent.bytes != static_cast<std::size_t>(bytes) ||
      !packed_layout(type))
    return false;
  out->bytes = bytes;
  out->data = static_cast<const char*>(buf) + extent.lb;
  out->info = extent.lb == 0 ? info : gpu::classify(out->data);
  out->backend = gpu::owner_backend(out->info);
  if (out->info.kind != gpu::MemoryKind::kDevice || !out->backend) return false;
  return peer_rank(comm, dest, &out->to);
}

}  // namespace

bool takes(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  Eligible e;
  return eligible(buf, count, type, dest, tag, comm, &e);
}

namespace {

// The envelope of a message with data, a bounce buffer's unless an offer
// fills in its claim; its buffer still to name.
Envelope data_envelope(const Eligible& e, int tag) {
  Envelope env{};
  env.comm_id = e.to.comm_id;
  env.tag = tag;
  env.kind = EnvelopeKind::kPeerMemory;
  env.bytes = static_cast<std::uint64_t>(e.bytes);
  env.reply_tag = next_reply_tag();
  env.claim_slot = -1;
  return env;
}

// The marker: an empty message the real MPI matches like the user's own.
int send_marker(Mode mode, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
  switch (mode) {
    case Mode::kSynchronous:
      return request ? PMPI_Issend(nullptr, 0, MPI_BYTE, dest, tag, comm, request)
                     : PMPI_Ssend(nullptr, 0, MPI_BYTE, dest, tag, comm);
    case Mode::kReady:
      return request ? PMPI_Irsend(nullptr, 0, MPI_BYTE, dest, tag, comm, request)
                     : PMPI_Rsend(nullptr, 0, MPI_BYTE, dest, tag, comm);
    default:
      return request ? PMPI_Isend(nullptr, 0, MPI_BYTE, dest, tag, comm, request)
                     : PMPI_Send(nullptr, 0, MPI_BYTE, dest, tag, comm);
  }
}

// An offer in flight: what offer_finish needs.
struct Offer {
  Eligible e;
  Bounce* bounce;
  int slot;
  std::uint64_t ticket;
  Envelope env;
  MPI_Comm comm;
  HostBounce* host = nullptr;  // taken when withdrawn with no bounce buffer free
};

void give_back_bounce(Bounce* bounce) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.bounce_mutex);
  bounce->busy = false;
}

// What a persistent send holds from its init to its free: a claim word and
// the reply tag its request (a persistent receive of the word that ends
// each offer) listens to.
struct Held {
  int slot;
  std::int32_t reply_tag;
};

// Starts a send that offers its own buffer: sends the envelope and the
// marker. A nonblocking one (request) first posts *request, the receive of
// the word that ends the offer, and lets its marker go. A persistent one
// (held) uses what it holds, and its request is posted by MPI_Start. An
// offer holds no bounce buffer: withdrawn, it takes a device one if one is
// free within FERRY_PT2PT_BOUNCE_BYTES, else a host one (host_bounce.h),
// so a window of many large sends neither holds a bounce buffer each nor
// is staged past the limit. False in *handled when no offer could be made
// (nothing sent).
int offer_start(FunctionId id, Mode mode, const Eligible& e, int dest, int tag, MPI_Comm comm, MPI_Request* request,
                Offer* offer, bool* handled, const Held* held = nullptr) {
  *handled = false;
  State& s = state();
  std::uint64_t ticket = 0;
  const int slot = held ? held->slot : take_claim(&ticket);
  if (held) ticket = next_ticket();
  Envelope env = data_envelope(e, tag);
  if (held) env.reply_tag = held->reply_tag;
  env.claim_slot = slot;
  env.claim_pid = static_cast<std::int32_t>(getpid());
  env.claim_nonce = s.claims_nonce;
  env.segment_fd = s.claims_fd;
  env.claim_ticket = ticket;
  env.chunk_bytes = env.bytes;
  env.reply_when_copied = request || held;
  auto not_offered = [&] {
    if (slot >= 0 && !held) give_claim(slot);
    return MPI_SUCCESS;
  };
  if (slot < 0 || !ok(s.memory.export_buffer(e.data, e.info, &env.buffer))) return not_offered();
  if (request && PMPI_Irecv(nullptr, 0, MPI_BYTE, MPI_ANY_SOURCE, env.reply_tag, s.answers, request) != MPI_SUCCESS)
    return not_offered();
  s.claims[slot].store(claim_word(ticket, kOffered), std::memory_order_release);
  if (PMPI_Send(&env, sizeof(env), MPI_BYTE, e.to.world, kEnvelopeTag, s.control) != MPI_SUCCESS) {
    if (request) {
      PMPI_Cancel(request);
      PMPI_Request_free(request);
    }
    return not_offered();
  }
  *handled = true;
  *offer = Offer{e, nullptr, slot, ticket, env, comm};
  // A persistent send's route is its init's.
  if (!held) record_route(id, RouteDecision{Route::kEngine, "peer memory"});
  if (!request && !held) {
    const int rc = send_marker(mode, dest, tag, comm, nullptr);
    return rc == MPI_SUCCESS ? rc : raise_error(comm, rc);
  }
  // The marker completes on its own (it is empty); *request stands for the send.
  MPI_Request marker = MPI_REQUEST_NULL;
  int rc = send_marker(mode, dest, tag, comm, &marker);
  if (rc == MPI_SUCCESS) rc = PMPI_Request_free(&marker);
  return rc == MPI_SUCCESS ? rc : raise_error(comm, rc);
}

// A withdrawn offer's data goes through its bounce buffer: filled, its
// envelope sent (on the reply tag the receive then listens to), and
// returns once the send buffer has been read. A nonblocking offer's
// request is ended (end_request) once the buffer has been read and before
// the envelope goes, so that the bounce buffer's acknowledgement, on the
// same reply tag, cannot end it. An MPI error class.
int send_withdrawn(Offer& offer, const std::function<int()>& end_request = nullptr) {
  State& s = state();
  Bounce* bounce = offer.bounce;
  Envelope bounced = offer.env;
  bounced.claim_slot = -1;
  bounced.reply_when_copied = 0;
  auto buffer_read = [&] { return ok(offer.e.backend->event_synchronize(bounce->filled)); };
  if (!ok(s.memory.export_buffer(bounce->ptr, &bounced.buffer)) || !ok(fill_bounce(*bounce, offer.e.data, &bounced)) ||
      (end_request && !buffer_read())) {
    give_back_bounce(bounce);
    if (end_request) end_request();
    return MPI_ERR_OTHER;
  }
  s.bounced.fetch_add(1, std::memory_order_relaxed);
  int rc = end_request ? end_request() : MPI_SUCCESS;
  if (rc == MPI_SUCCESS) {
    std::lock_guard<std::mutex> lock(s.bounce_mutex);
    MPI_Request reply = MPI_REQUEST_NULL;
    rc = PMPI_Irecv(&bounce->reply, 1, MPI_INT32_T, offer.e.to.world, bounced.reply_tag, s.answers, &reply);
    if (rc == MPI_SUCCESS) s.in_flight.push_back(SendInFlight{reply, bounce});
  }
  if (rc == MPI_SUCCESS)
    rc = PMPI_Send(&bounced, sizeof(bounced), MPI_BYTE, offer.e.to.world, bounced.reply_tag, s.control);
  if (rc != MPI_SUCCESS || end_request) return rc;
  // A blocking send waits for its buffer to be read while the receive
  // already copies the chunks that are there.
  return buffer_read() ? MPI_SUCCESS : MPI_ERR_OTHER;
}

// A withdrawn offer's data through its host bounce buffer: copied there,
// its request ended (end_request), the acknowledgement's receive posted
// and the envelope sent on the reply tag. Returns once the send buffer has
// been read. An MPI error class.
int send_withdrawn_to_host(Offer& offer, const std::function<int()>& end_request = nullptr) {
  State& s = state();
  HostBounce* host = offer.host;
  Envelope moved = offer.env;
  moved.kind = EnvelopeKind::kHostBounce;
  moved.claim_slot = -1;
  moved.reply_when_copied = 0;
  moved.first_chunk = 0;
  std::memset(&moved.buffer, 0, sizeof(moved.buffer));
  moved.buffer.pid = static_cast<std::int32_t>(getpid());
  moved.buffer.allocation_id = host->index;
  moved.claim_nonce = s.host_bounces->nonce();
  moved.segment_fd = host->fd;
  const bool read = ok(gpu::copy(host->data, offer.e.data, static_cast<std::size_t>(offer.e.bytes)));
  int rc = end_request ? end_request() : MPI_SUCCESS;
  if (!read) {
    std::lock_guard<std::mutex> lock(s.bounce_mutex);
    host->busy = false;
    return MPI_ERR_OTHER;
  }
  s.host_bounced.fetch_add(1, std::memory_order_relaxed);
  if (rc == MPI_SUCCESS) {
    std::lock_guard<std::mutex> lock(s.bounce_mutex);
    MPI_Request reply = MPI_REQUEST_NULL;
    rc = PMPI_Irecv(&host->reply, 1, MPI_INT32_T, offer.e.to.world, moved.reply_tag, s.answers, &reply);
    if (rc == MPI_SUCCESS) {
      s.in_flight.push_back(SendInFlight{reply, nullptr, host});
    } else {
      host->busy = false;
    }
  }
  if (rc == MPI_SUCCESS) rc = PMPI_Send(&moved, sizeof(moved), MPI_BYTE, offer.e.to.world, moved.reply_tag, s.control);
  return rc;
}

// While a send waits for its offer to be claimed: this rank's receives
// that are complete take their messages now, claiming the offers they
// matched, since their senders may be waiting the same way.
void claim_what_arrived() { deliver_receives_posted_before(kPostedNow); }

// An offer from the call that made it until it ends: a blocking send's
// call waits for it; a nonblocking or persistent send's (has_request) ends
// with a word to its request, and a completion call finishes it.
struct PendingOffer {
  Offer offer;
  bool has_request = true;
  bool persistent = false;  // its claim word is its request's
  bool looked_at = false;   // by its call or a completion call: its time runs from then
  std::chrono::steady_clock::time_point offer_ends, gives_up;
  bool ended = false;  // copied, withdrawn or given up on (a request's word is on its way)
  bool withdrawn = false;
  bool slot_lost = false;  // claimed and never finished: its claim word stays out of use
  bool released = false;   // by finish_offer
  int error = MPI_SUCCESS;
};

// Completes an offer's request from this rank: the word, sent to itself.
int end_here(const PendingOffer& n) {
  const State& s = state();
  return PMPI_Send(nullptr, 0, MPI_BYTE, s.world_rank, n.offer.env.reply_tag, s.answers);
}

// A bounce buffer for an offer that has none (a persistent send's, made
// while all were in use), if one is free now.
bool has_bounce(Offer& offer) {
  if (offer.bounce) return true;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.bounce_mutex);
  reap_locked(s);
  offer.bounce = take_bounce_locked(s, offer.e.backend, offer.e.info.device, static_cast<std::size_t>(offer.e.bytes));
  return offer.bounce != nullptr;
}

// A host bounce buffer for an offer about to be withdrawn when no device
// one is free, if one can be had within FERRY_PT2PT_HOST_BOUNCE_BYTES.
bool has_host_bounce(Offer& offer) {
  if (offer.host) return true;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.bounce_mutex);
  reap_locked(s);
  if (!s.host_bounces) s.host_bounces = std::make_unique<HostBounces>(s.claims_nonce);
  const std::uint64_t limit = static_cast<std::uint64_t>(std::max<std::int64_t>(params().pt2pt_host_bounce_bytes, 0));
  offer.host = s.host_bounces->take(static_cast<std::size_t>(offer.e.bytes), limit);
  return offer.host != nullptr;
}

// Copies an offer's data into the receive buffer its receive asked for
// (ask_sender_to_copy); false if it cannot.
bool push_to_receive(const Offer& offer) {
  State& s = state();
  const PushRequest& request = s.push_requests[offer.slot];
  void* destination = nullptr;
  if (request.ticket != offer.ticket || request.bytes > static_cast<std::uint64_t>(offer.e.bytes) ||
      !ok(s.memory.pin_buffer(request.destination, &destination)))
    return false;
  const bool copied = ok(offer.e.backend->copy(destination, offer.e.data, request.bytes));
  s.memory.unpin_buffer(request.destination);
  return copied;
}

// One look at an offer: it has ended once its receive copied it; it is
// withdrawn once it waited FERRY_PT2PT_CLAIM_US unclaimed (at once with
// withdraw_now), counted from its first look or from the last time the
// same receiver was seen claiming an offer of this rank, whichever is later
// (a receive copying a window of large messages one after another is busy,
// not absent); a claim never finished is given up on after
// FERRY_HANDSHAKE_TIMEOUT.
void look_at(PendingOffer& n, bool withdraw_now) {
  if (n.ended) return;
  const auto now = std::chrono::steady_clock::now();
  const auto window = std::chrono::microseconds(params().pt2pt_claim_us);
  if (!n.looked_at) {
    n.looked_at = true;
    n.offer_ends = now + window;
    n.gives_up = handshake_deadline();
  }
  State& s = state();
  std::atomic<std::uint64_t>& claim = s.claims[n.offer.slot];
  const std::uint64_t ticket = n.offer.ticket;
  std::uint64_t word = claim.load(std::memory_order_acquire);
  std::atomic<std::int64_t>& receiver_claimed = s.claimed_at[n.offer.e.to.world];
  const std::int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  if (word == claim_word(ticket, kClaimed) || word == claim_word(ticket, kClaimDone) ||
      word == claim_word(ticket, kPushWanted))
    receiver_claimed.store(now_ns, std::memory_order_relaxed);
  const bool expired =
      withdraw_now ||
      (now > n.offer_ends && now_ns > receiver_claimed.load(std::memory_order_relaxed) +
                                          std::chrono::duration_cast<std::chrono::nanoseconds>(window).count());
  if (word == claim_word(ticket, kClaimDone)) {
    n.ended = true;
  } else if (word == claim_word(ticket, kPushWanted) &&
             claim.compare_exchange_strong(word, claim_word(ticket, kPushing), std::memory_order_acq_rel)) {
    claim.store(claim_word(ticket, push_to_receive(n.offer) ? kPushed : kPushRefused), std::memory_order_release);
  } else if (word == claim_word(ticket, kOffered) && expired && (has_bounce(n.offer) || has_host_bounce(n.offer)) &&
             claim.compare_exchange_strong(word, claim_word(ticket, kWithdrawn), std::memory_order_acq_rel)) {
    n.ended = n.withdrawn = true;
    FERRY_TRACE(Shim, "a %lld-byte offer to rank %d withdrawn, unclaimed %lld us after its first look",
                static_cast<long long>(n.offer.e.bytes), n.offer.e.to.world,
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::microseconds>(now - (n.offer_ends - window)).count()));
    std::function<int()> end_request;
    if (n.has_request) end_request = [&n] { return end_here(n); };
    n.error = n.offer.bounce ? send_withdrawn(n.offer, end_request) : send_withdrawn_to_host(n.offer, end_request);
  } else if (word == claim_word(ticket, kOffered) && now > n.gives_up &&
             claim.compare_exchange_strong(word, claim_word(ticket, kWithdrawn), std::memory_order_acq_rel)) {
    // No bounce buffer to go on through, and no receive came.
    FERRY_WARN(Shim, "a %lld-byte device message was not received within FERRY_HANDSHAKE_TIMEOUT",
               static_cast<long long>(n.offer.e.bytes));
    n.ended = n.withdrawn = true;
    n.error = MPI_ERR_OTHER;
    if (n.has_request) end_here(n);
  } else if ((word == claim_word(ticket, kClaimed) || word == claim_word(ticket, kPushed)) && now > n.gives_up) {
    FERRY_WARN(Shim, "a receive claimed a %lld-byte message and did not finish within FERRY_HANDSHAKE_TIMEOUT",
               static_cast<long long>(n.offer.e.bytes));
    n.ended = n.slot_lost = true;
    n.error = MPI_ERR_OTHER;
    if (n.has_request) end_here(n);
  }
}

// Gives back what an ended offer held (a withdrawn one's bounce buffer is
// the send's until its receive acknowledges it) and counts the send among
// those copied straight (straight) if it was. The send's error class.
int release_offer(const PendingOffer& n, std::atomic<std::uint64_t>& straight) {
  if (!n.withdrawn && n.offer.bounce) give_back_bounce(n.offer.bounce);
  if (!n.withdrawn && !n.slot_lost) straight.fetch_add(1, std::memory_order_relaxed);
  if (!n.persistent && !n.slot_lost) give_claim(n.offer.slot);
  return n.error == MPI_SUCCESS ? MPI_SUCCESS : raise_error(n.offer.comm, n.error);
}

// Finishes a blocking send's offer: returns once the receive that claimed
// it has copied the buffer, or, when nothing claimed it within
// FERRY_PT2PT_CLAIM_US (from now), withdraws it.
int offer_finish(Offer& offer) {
  PendingOffer n{offer};
  n.has_request = false;
  for (int polls = 0;; ++polls) {
    look_at(n, false);
    if (n.ended) break;
    claim_what_arrived();
    if (polls > 1024) std::this_thread::yield();
  }
  return release_offer(n, state().straight_blocking);
}

// A persistent send (MPI_Send_init, MPI_Rsend_init): what each MPI_Start
// offers. Its handle stays the application's until MPI_Request_free.
struct PersistentSend {
  FunctionId id;
  Mode mode;
  Eligible e;
  int dest;
  int tag;
  MPI_Comm comm;
  Held held;
};

PersistentSend* find_persistent_send(MPI_Request request) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.offers_mutex);
  auto it = s.persistent_sends.find(request);
  return it == s.persistent_sends.end() ? nullptr : it->second.get();
}

std::unique_ptr<PersistentSend> take_persistent_send(MPI_Request request) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.offers_mutex);
  auto it = s.persistent_sends.find(request);
  if (it == s.persistent_sends.end()) return nullptr;
  std::unique_ptr<PersistentSend> entry = std::move(it->second);
  s.persistent_sends.erase(it);
  s.live_persistent_sends.fetch_sub(1, std::memory_order_release);
  return entry;
}

std::shared_ptr<PendingOffer> find_offer(MPI_Request request) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.offers_mutex);
  auto it = s.offers.find(request);
  return it == s.offers.end() ? nullptr : it->second;
}

// An entry left by an offer whose request the real MPI completed and
// another thread's finish_offer has not yet taken is replaced (and no
// longer counted).
std::shared_ptr<PendingOffer> add_offer(MPI_Request request, const Offer& offer, bool persistent) {
  State& s = state();
  auto n = std::make_shared<PendingOffer>(PendingOffer{offer});
  n->persistent = persistent;
  std::lock_guard<std::mutex> lock(s.offers_mutex);
  if (s.offers.insert_or_assign(request, n).second) s.live_offers.fetch_add(1, std::memory_order_release);
  return n;
}

// After the real MPI completed the request of offer n: gives back what it
// held, once; its entry leaves the table unless a new offer took it.
int finish_offer(MPI_Request request, PendingOffer& n) {
  State& s = state();
  if (n.released) return MPI_SUCCESS;
  n.released = true;
  {
    std::lock_guard<std::mutex> lock(s.offers_mutex);
    auto it = s.offers.find(request);
    if (it != s.offers.end() && it->second.get() == &n) {
      s.offers.erase(it);
      s.live_offers.fetch_sub(1, std::memory_order_release);
    }
  }
  // Its request completed, so the word came: from the receive once it had
  // copied the buffer, unless this rank ended the offer itself.
  if (n.persistent && n.slot_lost) {
    if (PersistentSend* p = find_persistent_send(request)) p->held.slot = -1;
  }
  return release_offer(n, s.straight_nonblocking);
}

// finish_offer of a persistent send's current offer (its handle stays the
// application's, so the table finds it).
int finish_persistent_offer(MPI_Request request) {
  const std::shared_ptr<PendingOffer> n = find_offer(request);
  return n ? finish_offer(request, *n) : MPI_SUCCESS;
}

// MPI_Start of a persistent send: its offer, before the real MPI starts the
// request (the receive of the word that ends it).
int start_persistent_send(MPI_Request request) {
  PersistentSend* p = find_persistent_send(request);
  if (!p) return MPI_SUCCESS;
  if (p->held.slot < 0) {
    // Its word was lost to a claim never finished: another one.
    std::uint64_t ticket = 0;
    p->held.slot = take_claim(&ticket);
    if (p->held.slot < 0) {
      FERRY_WARN(Shim, "MPI_Start of a persistent device send: every claim word is in use");
      return raise_error(p->comm, MPI_ERR_OTHER);
    }
  }
  Offer offer;
  bool handled = false;
  const int rc = offer_start(p->id, p->mode, p->e, p->dest, p->tag, p->comm, nullptr, &offer, &handled, &p->held);
  if (!handled) return raise_error(p->comm, MPI_ERR_OTHER);
  add_offer(request, offer, true);
  return rc;
}

}  // namespace

bool offers_live() { return state().live_offers.load(std::memory_order_acquire) > 0; }

bool any_persistent_send(int count, const MPI_Request* requests) {
  if (state().live_persistent_sends.load(std::memory_order_acquire) == 0 || !requests) return false;
  for (int i = 0; i < count; ++i)
    if (find_persistent_send(requests[i])) return true;
  return false;
}

bool is_offer(MPI_Request request) { return offers_live() && find_offer(request); }

bool any_offer(int count, const MPI_Request* requests) {
  if (!offers_live() || !requests) return false;
  for (int i = 0; i < count; ++i)
    if (find_offer(requests[i])) return true;
  return false;
}

void settle_offers(int count, const MPI_Request* requests, bool wait) {
  if (!offers_live() || !requests) return;
  std::vector<std::shared_ptr<PendingOffer>> offers;
  for (int i = 0; i < count; ++i)
    if (std::shared_ptr<PendingOffer> n = find_offer(requests[i])) offers.push_back(std::move(n));
  for (int polls = 0; !offers.empty(); ++polls) {
    bool all_ended = true;
    for (const std::shared_ptr<PendingOffer>& n : offers) {
      look_at(*n, false);
      all_ended = all_ended && n->ended;
    }
    if (all_ended || !wait) return;
    claim_what_arrived();
    if (polls > 1024) std::this_thread::yield();
  }
}

int free_offer(MPI_Request request) {
  const std::shared_ptr<PendingOffer> n = offers_live() ? find_offer(request) : nullptr;
  int rc = MPI_SUCCESS;
  if (n) {
    for (look_at(*n, true); !n->ended; look_at(*n, true)) std::this_thread::yield();
    rc = finish_offer(request, *n);
  }
  const std::unique_ptr<PersistentSend> persistent = take_persistent_send(request);
  if (persistent && persistent->held.slot >= 0) give_claim(persistent->held.slot);
  return rc;
}

SendCounts send_counts() {
  const State& s = state();
  return SendCounts{s.straight_blocking.load(), s.straight_nonblocking.load(), s.bounced.load(), s.host_bounced.load(),
                    s.pushed.load()};
}

int send(FunctionId id, Mode mode, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
         MPI_Request* request, bool* handled) {
  *handled = false;
  Eligible e;
  if (mode == Mode::kNone || !eligible(buf, count, type, dest, tag, comm, &e)) return MPI_SUCCESS;
  // A nonblocking synchronous send completes once its receive matched, which
  // its offer's request would not wait for when withdrawn: a bounce buffer.
  if (params().pt2pt_claim_us > 0 && (!request || mode != Mode::kSynchronous)) {
    Offer offer;
    const int rc = offer_start(id, mode, e, dest, tag, comm, request, &offer, handled);
    if (*handled && !request) return rc == MPI_SUCCESS ? offer_finish(offer) : rc;
    if (*handled) {
      const MPI_Request tracked = *request;
      std::shared_ptr<PendingOffer> n = add_offer(tracked, offer, false);
      track_request(tracked, [tracked, n] { return finish_offer(tracked, *n); });
      return rc;
    }
  }
  const std::int64_t bytes = e.bytes;
  const void* data = e.data;
  const gpu::PointerInfo& info = e.info;
  gpu::Backend* backend = e.backend;
  const PeerRank& to = e.to;
  State& s = state();

  std::lock_guard<std::mutex> lock(s.bounce_mutex);
  reap_locked(s);
  Bounce* bounce = take_bounce_locked(s, backend, info.device, static_cast<std::size_t>(bytes));
  if (!bounce) return MPI_SUCCESS;  // over FERRY_PT2PT_BOUNCE_BYTES: staged
  auto give_back = [&] { bounce->busy = false; };
  Envelope env = data_envelope(e, tag);
  if (!ok(s.memory.export_buffer(bounce->ptr, &env.buffer)) || !ok(fill_bounce(*bounce, data, &env))) {
    give_back();
    return MPI_SUCCESS;
  }
  // The reply's receive first, so the reply never waits unexpected.
  MPI_Request reply = MPI_REQUEST_NULL;
  if (PMPI_Irecv(&bounce->reply, 1, MPI_INT32_T, to.world, env.reply_tag, s.answers, &reply) != MPI_SUCCESS) {
    give_back();
    return MPI_SUCCESS;
  }
  if (PMPI_Send(&env, sizeof(env), MPI_BYTE, to.world, kEnvelopeTag, s.control) != MPI_SUCCESS) {
    PMPI_Cancel(&reply);
    PMPI_Request_free(&reply);
    give_back();
    return MPI_SUCCESS;
  }
  s.in_flight.push_back(SendInFlight{reply, bounce});
  s.bounced.fetch_add(1, std::memory_order_relaxed);
  *handled = true;
  record_route(id, RouteDecision{Route::kEngine, "peer memory"});
  const int rc = send_marker(mode, dest, tag, comm, request);
  if (rc != MPI_SUCCESS) return raise_error(comm, rc);
  // The user may reuse the buffer once the copies out of it are done: now
  // for a blocking send, in the call that completes the request otherwise.
  gpu::Event filled = bounce->filled;
  auto copied_out = [backend, filled, comm] {
    const Status status = backend->event_synchronize(filled);
    return ok(status) ? MPI_SUCCESS : raise_error(comm, MPI_ERR_OTHER);
  };
  if (!request) return copied_out();
  track_request(*request, copied_out);
  return MPI_SUCCESS;
}

int send_init(FunctionId id, Mode mode, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* request, bool* handled) {
  *handled = false;
  Eligible e;
  if (params().pt2pt_claim_us <= 0 || (mode != Mode::kStandard && mode != Mode::kReady) ||
      !eligible(buf, count, type, dest, tag, comm, &e))
    return MPI_SUCCESS;
  State& s = state();
  std::uint64_t ticket = 0;
  const int slot = take_claim(&ticket);
  if (slot < 0) return MPI_SUCCESS;
  const Held held{slot, next_reply_tag()};
  if (PMPI_Recv_init(nullptr, 0, MPI_BYTE, MPI_ANY_SOURCE, held.reply_tag, s.answers, request) != MPI_SUCCESS) {
    give_claim(slot);
    return MPI_SUCCESS;
  }
  {
    std::lock_guard<std::mutex> lock(s.offers_mutex);
    s.persistent_sends[*request] = std::make_unique<PersistentSend>(PersistentSend{id, mode, e, dest, tag, comm, held});
    s.live_persistent_sends.fetch_add(1, std::memory_order_release);
  }
  *handled = true;
  record_route(id, RouteDecision{Route::kEngine, "peer memory"});
  const MPI_Request handle = *request;
  track_persistent_send(
      handle, [handle] { return start_persistent_send(handle); }, [handle] { return finish_persistent_offer(handle); });
  return MPI_SUCCESS;
}

int sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
             const std::function<int()>& receive, MPI_Comm comm, bool* handled) {
  *handled = false;
  Eligible e;
  if (params().pt2pt_claim_us <= 0 || !eligible(sendbuf, sendcount, sendtype, dest, sendtag, comm, &e))
    return MPI_SUCCESS;
  Offer offer;
  int rc = offer_start(FunctionId::kSendrecv, Mode::kStandard, e, dest, sendtag, comm, nullptr, &offer, handled);
  if (!*handled) return MPI_SUCCESS;
  count_bytes(FunctionId::kSendrecv, sendcount, sendtype);
  // The receive runs while the offer stands (its peer may be claiming it).
  const int received = rc == MPI_SUCCESS ? receive() : rc;
  rc = offer_finish(offer);
  return received != MPI_SUCCESS ? received : rc;
}

namespace {

// The envelope of the message a receive or probe found, when that message
// is a marker (*marker): taken from the sender's queue, or left there with
// peek. The receives posted before `posted` take theirs first: they
// matched earlier messages.
int marker_envelope(MPI_Comm comm, const MPI_Status* status, bool peek, std::uint64_t posted, Envelope* env, int* world,
                    bool* marker) {
  *marker = false;
  PeerRank from;
  if (!empty_from_peer(comm, status, &from)) return MPI_SUCCESS;
  deliver_receives_posted_before(posted);
  const int rc = find_envelope(from.world, from.comm_id, status->MPI_TAG, peek, env);
  *world = from.world;
  *marker = rc == MPI_SUCCESS && env->kind == EnvelopeKind::kPeerMemory;
  return rc;
}

}  // namespace

int after_receive(MPI_Comm comm, void* buf, int count, MPI_Datatype type, MPI_Status* status, std::uint64_t posted) {
  Envelope env;
  int world = 0;
  bool marker = false;
  const int rc = marker_envelope(comm, status, false, posted, &env, &world, &marker);
  return marker ? receive_message(comm, env, world, buf, count, type, status) : rc;
}

int after_probe(MPI_Comm comm, MPI_Status* status) {
  Envelope env;
  int world = 0;
  bool marker = false;
  const int rc = marker_envelope(comm, status, true, kPostedNow, &env, &world, &marker);
  if (marker) PMPI_Status_set_elements_x(status, MPI_BYTE, static_cast<MPI_Count>(env.bytes));
  return rc;
}

struct TakenEnvelope {
  Envelope env;
  int world;
};

int after_matched_probe(MPI_Comm comm, MPI_Status* status, TakenEnvelope** taken) {
  *taken = nullptr;
  Envelope env;
  int world = 0;
  bool marker = false;
  const int rc = marker_envelope(comm, status, false, kPostedNow, &env, &world, &marker);
  if (!marker) return rc;
  *taken = new TakenEnvelope{env, world};
  PMPI_Status_set_elements_x(status, MPI_BYTE, static_cast<MPI_Count>(env.bytes));
  return MPI_SUCCESS;
}

int receive_taken(MPI_Comm comm, TakenEnvelope* taken, void* buf, int count, MPI_Datatype type, MPI_Status* status) {
  std::unique_ptr<TakenEnvelope> owned(taken);
  return receive_message(comm, owned->env, owned->world, buf, count, type, status);
}

}  // namespace ferry::shim::peer
