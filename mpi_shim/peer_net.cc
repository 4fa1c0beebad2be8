#include "mpi_shim/peer_net.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/bootstrap/mpi_bootstrap.h"
#include "engine/bootstrap/mpi_network.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/core/net_channel.h"
#include "engine/core/transport_table.h"
#include "mpi_shim/peer_receive.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/route.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::peer {

namespace {

// Open from MPI_Init to MPI_Finalize where the ranks span machines.
std::unique_ptr<NetChannel> g_channel;

NetChannel& channel() { return *g_channel; }

// The message's envelope: kNet, its net tag in reply_tag.
Envelope net_envelope(const Eligible& e, int tag, int net_tag) {
  Envelope env{};
  env.comm_id = e.to.comm_id;
  env.tag = tag;
  env.kind = EnvelopeKind::kNet;
  env.bytes = static_cast<std::uint64_t>(e.bytes);
  env.reply_tag = net_tag;
  env.claim_slot = -1;
  env.segment_fd = -1;
  return env;
}

void progress_sends() {
  if (g_channel) g_channel->progress();
}

int error_of(Status status, MPI_Comm comm, std::int64_t bytes, int world) {
  if (ok(status)) return MPI_SUCCESS;
  FERRY_WARN(Shim, "a %lld-byte message with rank %d of another machine failed on the net transport: %s",
             static_cast<long long>(bytes), world, status_name(status));
  return raise_error(comm, MPI_ERR_OTHER);
}

// Posts e's message (now: handed to the network whole) and sends its
// envelope. *handled false: nothing went out.
int start_message(const Eligible& e, int tag, bool now, std::shared_ptr<NetChannel::Send>* sent, bool* handled) {
  *handled = false;
  const int net_tag = channel().take_tag(e.to.world);
  if (!ok(channel().start_send(e.to.world, e.data, static_cast<std::size_t>(e.bytes), net_tag, now, sent)))
    return MPI_SUCCESS;
  *handled = true;
  counters().net.fetch_add(1, std::memory_order_relaxed);
  return send_envelope(net_envelope(e, tag, net_tag), e.to.world);
}

// A send whose message is handed to the network whole: the user's buffer
// is free at once, as after a buffered send; the channel keeps the message
// until it has left.
int hand_over(const Eligible& e, int tag, bool* handled) {
  std::shared_ptr<NetChannel::Send> sent;
  return start_message(e, tag, true, &sent, handled);
}

// A persistent send: every MPI_Start hands the message to the network and
// sends its envelope before the real MPI starts the marker.
class NetPersistentSend final : public TrackedRequest {
 public:
  NetPersistentSend(const Eligible& e, int tag, MPI_Comm comm)
      : TrackedRequest(Lifetime::kPersistent), e_(e), tag_(tag), comm_(comm) {
    make_uncancellable();
  }
  bool starts_alone() const override { return true; }

 private:
  int on_restart() override {
    bool handled = false;
    const int rc = hand_over(e_, tag_, &handled);
    if (!handled) {
      FERRY_WARN(Shim, "MPI_Start of a persistent device send to rank %d: the net transport refused it", e_.to.world);
      return raise_error(comm_, MPI_ERR_OTHER);
    }
    return rc == MPI_SUCCESS ? rc : raise_error(comm_, rc);
  }

  Eligible e_;
  int tag_;
  MPI_Comm comm_;
};

}  // namespace

int net_wanted_here() {
  std::vector<std::string> unknown;
  const AllowedTransports allowed =
      allowed_transports(params().transports, params().p2p_disable, params().shm_disable, &unknown);
  if (!allowed.net) return 0;
  return params().net == "auto" && net_provider_here() == "ib" ? kNetWantsIb : kNetWanted;
}

bool open_net(bool open, bool all_ib) {
  if (!open) return false;
  // auto: ib where every rank has a port, else the application's MPI.
  const std::string provider = params().net == "auto" ? (all_ib ? "ib" : "mpi") : params().net;
  const auto chunk_bytes = static_cast<std::size_t>(std::max<std::int64_t>(params().net_chunk_bytes, 0));
  const int chunks = static_cast<int>(params().net_chunks);
  // As many idle pinned chunks as the staging pool may hold: sends handed
  // over whole take them by the message.
  const auto idle_bytes = static_cast<std::size_t>(std::max<std::int64_t>(params().staging_pool_max_bytes, 0));
  Status status = Status::kUnavailable;
  if (provider != "mpi") {
    // The socket and ib providers' set-up exchanges addresses over a bootstrap.
    std::unique_ptr<Bootstrap> bootstrap = make_mpi_bootstrap(MPI_COMM_WORLD);
    if (bootstrap)
      status = NetChannel::open(std::move(bootstrap), provider, chunk_bytes, chunks, idle_bytes, &g_channel);
  } else {
    // One private communicator, the mpi provider's own.
    std::unique_ptr<NetProvider> provider = make_mpi_network(MPI_COMM_WORLD);
    if (provider) status = NetChannel::open(std::move(provider), chunk_bytes, chunks, idle_bytes, &g_channel);
  }
  if (!ok(status)) {
    FERRY_WARN(Shim, "point-to-point between machines: the %s network did not open (%s); device messages are staged",
               provider.c_str(), status_name(status));
    return false;
  }
  add_completion_progress(progress_sends);
  FERRY_INFO(Init, "point-to-point on device buffers between machines over the net transport (%s, from %lld bytes)",
             g_channel->provider(), static_cast<long long>(params().net_min_bytes));
  return true;
}

void close_net() { g_channel.reset(); }

int net_send(FunctionId id, Mode mode, const Eligible& e, int dest, int tag, MPI_Comm comm, MPI_Request* request,
             bool* handled) {
  if (request) {
    int rc = hand_over(e, tag, handled);
    if (!*handled) return MPI_SUCCESS;
    record_route(id, RouteDecision{Route::kEngine, "net"});
    if (rc == MPI_SUCCESS) rc = send_marker(mode, dest, tag, comm, request);
    return rc == MPI_SUCCESS ? rc : raise_error(comm, rc);
  }
  std::shared_ptr<NetChannel::Send> sent;
  int rc = start_message(e, tag, false, &sent, handled);
  if (!*handled) return MPI_SUCCESS;
  record_route(id, RouteDecision{Route::kEngine, "net"});
  if (rc == MPI_SUCCESS) rc = send_marker(mode, dest, tag, comm, nullptr);
  const Status status = channel().finish_send(sent, params().net_patience_us);
  if (rc != MPI_SUCCESS) return raise_error(comm, rc);
  return error_of(status, comm, e.bytes, e.to.world);
}

int net_sendrecv(const Eligible& e, int dest, int tag, const std::function<int()>& receive, MPI_Comm comm,
                 bool* handled) {
  std::shared_ptr<NetChannel::Send> sent;
  int rc = start_message(e, tag, false, &sent, handled);
  if (!*handled) return MPI_SUCCESS;
  record_route(FunctionId::kSendrecv, RouteDecision{Route::kEngine, "net"});
  if (rc == MPI_SUCCESS) rc = send_marker(Mode::kStandard, dest, tag, comm, nullptr);
  // Receiving moves the channel, this message too.
  const int received = rc == MPI_SUCCESS ? receive() : MPI_SUCCESS;
  const Status status = channel().finish_send(sent, params().net_patience_us);
  if (rc != MPI_SUCCESS) return raise_error(comm, rc);
  if (received != MPI_SUCCESS) return received;
  return error_of(status, comm, e.bytes, e.to.world);
}

int net_send_init(FunctionId id, Mode mode, const Eligible& e, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request, bool* handled) {
  *handled = false;
  const int rc = mode == Mode::kReady ? PMPI_Rsend_init(nullptr, 0, MPI_BYTE, dest, tag, comm, request)
                                      : PMPI_Send_init(nullptr, 0, MPI_BYTE, dest, tag, comm, request);
  if (rc != MPI_SUCCESS) return MPI_SUCCESS;
  *handled = true;
  record_route(id, RouteDecision{Route::kEngine, "net"});
  track(*request, std::make_unique<NetPersistentSend>(e, tag, comm));
  return MPI_SUCCESS;
}

int receive_net_message(MPI_Comm comm, const Envelope& env, int world, void* buf, int count, MPI_Datatype type,
                        MPI_Status* status) {
  Extent extent;
  const std::int64_t capacity = message_bytes(count, type);
  const bool described = capacity >= 0 && extent_of(count, type, &extent);
  const bool dense =
      described && extent.dense && extent.bytes == static_cast<std::size_t>(capacity) && packed_layout(type);
  const std::int64_t bytes = static_cast<std::int64_t>(env.bytes);
  const std::int64_t delivered = std::min<std::int64_t>(std::max<std::int64_t>(capacity, 0), bytes);
  // The whole message is always received (the channel frames it so): into
  // buf when it fits there as it is, else into host memory first.
  const bool straight = dense && bytes <= capacity;
  std::vector<char> landing(straight ? 0 : static_cast<std::size_t>(bytes));
  void* into = straight ? static_cast<char*>(buf) + extent.lb : landing.data();
  Status received = g_channel ? channel().receive(world, into, static_cast<std::size_t>(bytes), env.reply_tag)
                              : Status::kUnavailable;
  int error = MPI_SUCCESS;
  if (ok(received) && !straight && delivered > 0) {
    auto fetch = [&](void* dst, std::size_t length) { return gpu::copy(dst, landing.data(), length); };
    if (dense) {
      received = fetch(static_cast<char*>(buf) + extent.lb, static_cast<std::size_t>(delivered));
    } else {
      error = unpack_message(comm, buf, count, type, extent, capacity, delivered, fetch, &received);
    }
  }
  if (!ok(received)) {
    FERRY_WARN(Shim, "receiving a %lld-byte message from rank %d of another machine failed on the net transport: %s",
               static_cast<long long>(bytes), world, status_name(received));
    error = MPI_ERR_OTHER;
  } else if (error == MPI_SUCCESS && bytes > capacity) {
    error = MPI_ERR_TRUNCATE;
  }
  PMPI_Status_set_elements_x(status, MPI_BYTE, ok(received) ? delivered : 0);
  if (error != MPI_SUCCESS) status->MPI_ERROR = error;
  return error;
}

}  // namespace ferry::shim::peer
