// The call flow of point-to-point through peer memory (peer_pt2pt.h): the
// send, receive and probe entry points. What they use, each with its own
// state: communicators (peer_comms.h), envelopes and replies
// (peer_envelopes.h), claim words (peer_claims.h), bounce buffers
// (peer_bounce.h), offers (peer_offers.h, peer_offer_requests.h) and the
// receive's copy (peer_receive.h).
#include "mpi_shim/peer_pt2pt.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/collectives/communicator.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/common/trace.h"
#include "engine/core/locality.h"
#include "mpi_shim/mpi_flavour.h"
#include "mpi_shim/peer_bounce.h"
#include "mpi_shim/peer_claims.h"
#include "mpi_shim/peer_comms.h"
#include "mpi_shim/peer_envelopes.h"
#include "mpi_shim/peer_message.h"
#include "mpi_shim/peer_net.h"
#include "mpi_shim/peer_offer_requests.h"
#include "mpi_shim/peer_offers.h"
#include "mpi_shim/peer_receive.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::peer {

std::atomic<bool> g_active{false};

namespace {

bool wanted_here() {
  if (params().pt2pt != "peer" || forced_route() != ForcedRoute::kAuto) return false;
  std::vector<std::string> unknown;
  return allowed_transports(params().transports, params().p2p_disable, params().shm_disable, &unknown).p2p;
}

// Whether a status (of a receive that completed, or of a probe) is an empty
// message from another process of this machine on a known communicator:
// then it has an envelope. A probe's status is never asked whether it was
// cancelled: MPICH leaves that bit as the caller's memory had it.
bool empty_from_peer(MPI_Comm comm, const MPI_Status* status, bool probed, PeerRank* from) {
  if (!active() || status->MPI_SOURCE < 0) return false;
  int cancelled = 0;
  if (!probed) PMPI_Test_cancelled(status, &cancelled);
  int bytes = -1;
  if (cancelled || PMPI_Get_count(status, MPI_BYTE, &bytes) != MPI_SUCCESS || bytes != 0) return false;
  return peer_rank(comm, status->MPI_SOURCE, from);
}

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
  if (out->info.kind != gpu::MemoryKind::kDevice || !out->backend || !peer_rank(comm, dest, &out->to)) return false;
  // Between machines small messages are staged: the real MPI carries them
  // sooner than a marker, an envelope and a message of the channel.
  return !out->to.remote || bytes >= params().net_min_bytes;
}

}  // namespace

void start() {
  int rank = 0, size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  if (!wanted_here()) return;
  const std::uint64_t mine[2] = {machine_identity(), static_cast<std::uint64_t>(net_wanted_here())};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(size));
  if (PMPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD) != MPI_SUCCESS) return;
  std::vector<std::uint64_t> host_of(size);
  bool spans_machines = false, all_want_net = true, all_ib = true;
  for (int r = 0; r < size; ++r) {
    host_of[r] = all[2 * r];
    spans_machines = spans_machines || host_of[r] != host_of[0];
    all_want_net = all_want_net && all[2 * r + 1] >= kNetWanted;
    all_ib = all_ib && all[2 * r + 1] == kNetWantsIb;
  }
  start_offers(size);
  if (!open_channels()) return;
  // Every rank makes the same choice, so the channel's set-up is collective.
  const bool reach_remote = open_net(spans_machines && all_want_net, all_ib);
  start_comms(rank, std::move(host_of), reach_remote);
  g_active.store(true, std::memory_order_release);
  FERRY_INFO(Init, "point-to-point on device buffers through peer memory (from %lld bytes)",
             static_cast<long long>(params().pt2pt_min_bytes));
}

void stop() {
  if (!active()) return;
  drain_bounces();
  unmap_claims();
  g_active.store(false, std::memory_order_release);
  close_net();
  close_channels();
  stop_comms();
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
  return send_envelope(env, to.world);
}

bool takes(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  Eligible e;
  return eligible(buf, count, type, dest, tag, comm, &e);
}

SendCounts send_counts() {
  const Counters& c = counters();
  return SendCounts{c.straight_blocking.load(), c.straight_nonblocking.load(), c.bounced.load(), c.host_bounced.load(),
                    c.pushed.load(), c.net.load()};
}

int send(FunctionId id, Mode mode, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
         MPI_Request* request, bool* handled) {
  *handled = false;
  Eligible e;
  if (mode == Mode::kNone || !eligible(buf, count, type, dest, tag, comm, &e)) return MPI_SUCCESS;
  if (e.to.remote) return net_send(id, mode, e, dest, tag, comm, request, handled);
  // A nonblocking synchronous send completes once its receive matched, which
  // its offer's request would not wait for when withdrawn: a bounce buffer.
  if (params().pt2pt_claim_us > 0 && (!request || mode != Mode::kSynchronous)) {
    Offer offer;
    const int rc = offer_start(id, mode, e, dest, tag, comm, request, &offer, handled);
    if (*handled && !request) return rc == MPI_SUCCESS ? offer_finish(offer) : rc;
    if (*handled) {
      track_offer(*request, offer);
      return rc;
    }
  }
  const std::int64_t bytes = e.bytes;
  const void* data = e.data;
  const gpu::PointerInfo& info = e.info;
  gpu::Backend* backend = e.backend;
  const PeerRank& to = e.to;

  LockedBounces bounces;
  bounces.reap();
  Bounce* bounce = bounces.take(backend, info.device, static_cast<std::size_t>(bytes));
  if (!bounce) return MPI_SUCCESS;  // over FERRY_PT2PT_BOUNCE_BYTES: staged
  auto give_back = [&] { bounces.give_back(bounce); };
  Envelope env = data_envelope(e, tag);
  if (!ok(peer_memory().export_buffer(bounce->ptr, &env.buffer)) || !ok(fill_bounce(*bounce, data, &env))) {
    give_back();
    return MPI_SUCCESS;
  }
  // The reply's receive first, so the reply never waits unexpected.
  MPI_Request reply = MPI_REQUEST_NULL;
  if (PMPI_Irecv(&bounce->reply, 1, MPI_INT32_T, to.world, env.reply_tag, answers(), &reply) != MPI_SUCCESS) {
    give_back();
    return MPI_SUCCESS;
  }
  if (send_envelope(env, to.world) != MPI_SUCCESS) {
    PMPI_Cancel(&reply);
    PMPI_Request_free(&reply);
    give_back();
    return MPI_SUCCESS;
  }
  bounces.keep(SendInFlight{reply, bounce});
  counters().bounced.fetch_add(1, std::memory_order_relaxed);
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
  if ((mode != Mode::kStandard && mode != Mode::kReady) || !eligible(buf, count, type, dest, tag, comm, &e))
    return MPI_SUCCESS;
  if (e.to.remote) return net_send_init(id, mode, e, dest, tag, comm, request, handled);
  if (params().pt2pt_claim_us <= 0) return MPI_SUCCESS;
  std::uint64_t ticket = 0;
  const int slot = take_claim(&ticket);
  if (slot < 0) return MPI_SUCCESS;
  const Held held{slot, next_reply_tag()};
  if (PMPI_Recv_init(nullptr, 0, MPI_BYTE, MPI_ANY_SOURCE, held.reply_tag, answers(), request) != MPI_SUCCESS) {
    give_claim(slot);
    return MPI_SUCCESS;
  }
  *handled = true;
  record_route(id, RouteDecision{Route::kEngine, "peer memory"});
  track_persistent_offers(*request, PersistentSend{id, mode, e, dest, tag, comm, held});
  return MPI_SUCCESS;
}

int sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
             const std::function<int()>& receive, MPI_Comm comm, bool* handled) {
  *handled = false;
  Eligible e;
  if (!eligible(sendbuf, sendcount, sendtype, dest, sendtag, comm, &e)) return MPI_SUCCESS;
  if (e.to.remote) {
    const int rc = net_sendrecv(e, dest, sendtag, receive, comm, handled);
    if (*handled) count_bytes(FunctionId::kSendrecv, sendcount, sendtype);
    return rc;
  }
  if (params().pt2pt_claim_us <= 0) return MPI_SUCCESS;
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

// What found the message whose status a marker check reads.
enum class FoundBy {
  kReceive,       // a receive that completed: the envelope is taken
  kMatchedProbe,  // MPI_Mprobe and kin: taken, the message is this call's now
  kProbe,         // MPI_Probe and kin: left queued for the receive to come
};

// The envelope of the message a receive or probe found, when that message
// is a marker (*marker): taken from the sender's queue, or left there by a
// probe. The receives posted before `posted` take theirs first: they
// matched earlier messages.
int marker_envelope(MPI_Comm comm, const MPI_Status* status, FoundBy found, std::uint64_t posted, Envelope* env,
                    int* world, bool* marker) {
  *marker = false;
  PeerRank from;
  if (!empty_from_peer(comm, status, found != FoundBy::kReceive, &from)) return MPI_SUCCESS;
  deliver_receives_posted_before(posted);
  const bool peek = found == FoundBy::kProbe;
  const int rc = find_envelope(from.world, from.comm_id, status->MPI_TAG, peek, env);
  if (rc == MPI_SUCCESS && !peek) trace_flow_finish(env->flow_id);
  *world = from.world;
  *marker = rc == MPI_SUCCESS && (env->kind == EnvelopeKind::kPeerMemory || env->kind == EnvelopeKind::kNet);
  return rc;
}

}  // namespace

int after_receive(MPI_Comm comm, void* buf, int count, MPI_Datatype type, MPI_Status* status, std::uint64_t posted) {
  Envelope env;
  int world = 0;
  bool marker = false;
  const int rc = marker_envelope(comm, status, FoundBy::kReceive, posted, &env, &world, &marker);
  return marker ? receive_message(comm, env, world, buf, count, type, status) : rc;
}

int after_probe(MPI_Comm comm, MPI_Status* status) {
  Envelope env;
  int world = 0;
  bool marker = false;
  const int rc = marker_envelope(comm, status, FoundBy::kProbe, kPostedNow, &env, &world, &marker);
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
  const int rc = marker_envelope(comm, status, FoundBy::kMatchedProbe, kPostedNow, &env, &world, &marker);
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
