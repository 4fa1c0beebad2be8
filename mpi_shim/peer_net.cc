#include "mpi_shim/peer_net.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/bootstrap/mpi_bootstrap.h"
#include "engine/bootstrap/mpi_network.h"
#include "engine/collectives/collectives.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/core/transport_table.h"
#include "engine/transport/net_transport.h"
#include "mpi_shim/peer_receive.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/route.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::peer {

namespace {

// Net tags come round at this count per destination (MPI_TAG_UB is at
// least 32767). A tag is reused only after 32768 later messages to the
// same rank, long after its message was received.
constexpr std::uint32_t kNetTags = 32768;

struct NetChannel {
  // The transport is driven by one thread at a time; a waiting thread
  // holds it for one step of progress at a time.
  std::mutex mutex;
  std::unique_ptr<Bootstrap> bootstrap;  // the socket provider's connections were made over it
  std::unique_ptr<NetTransport> transport;
  std::vector<std::uint32_t> next_tag;  // by world rank
  // Sends whose requests may be freed before their message left; waited
  // for at close.
  std::vector<std::shared_ptr<Completion>> sends;
};

NetChannel& channel() {
  static auto* c = new NetChannel;
  return *c;
}

std::atomic<bool> g_open{false};

int take_tag(int world) {
  NetChannel& c = channel();
  std::lock_guard<std::mutex> lock(c.mutex);
  return static_cast<int>(c.next_tag[static_cast<std::size_t>(world)]++ % kNetTags);
}

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

// Drives the channel until *completion is done, or FERRY_HANDSHAKE_TIMEOUT
// (kTimeout: every message in flight is abandoned).
Status wait_for(Completion* completion) {
  NetChannel& c = channel();
  const auto deadline = handshake_deadline();
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      bool done = false;
      FERRY_CHECK(c.transport->test(completion, &done));
      if (done) return Status::kOk;
      if (polls % 1024 == 1023 && std::chrono::steady_clock::now() > deadline)
        return c.transport->wait_all({completion}, deadline);
    }
    if (polls % 64 == 63) sched_yield();
  }
}

// Posts e's message: windowed (moved on while this process waits for it)
// or, now, all handed to the network at once.
Status post_message(const Eligible& e, int net_tag, bool now, Completion* completion) {
  NetChannel& c = channel();
  std::lock_guard<std::mutex> lock(c.mutex);
  const std::size_t bytes = static_cast<std::size_t>(e.bytes);
  return now ? c.transport->post_send_now(e.to.world, e.data, bytes, net_tag, completion, handshake_deadline())
             : c.transport->post_send(e.to.world, e.data, bytes, net_tag, completion);
}

// The channel keeps a send that outlives its call until it has left.
void keep(std::shared_ptr<Completion> sent) {
  if (sent->done) return;
  NetChannel& c = channel();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.sends.erase(std::remove_if(c.sends.begin(), c.sends.end(), [](const auto& s) { return s->done; }),
                c.sends.end());
  c.sends.push_back(std::move(sent));
}

// Waits for a send posted windowed: until it has left, or, once its
// receive has taken nothing within FERRY_NET_PATIENCE_US (the program may
// make that receive only after this call), until the rest of it is handed
// to the network (then the channel keeps it).
Status finish_send(const std::shared_ptr<Completion>& sent) {
  NetChannel& c = channel();
  const auto patience = std::chrono::steady_clock::now() + std::chrono::microseconds(params().net_patience_us);
  const auto deadline = handshake_deadline();
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      bool done = false;
      FERRY_CHECK(c.transport->test(sent.get(), &done));
      if (done) return Status::kOk;
      const auto now = std::chrono::steady_clock::now();
      if (now > patience && !c.transport->any_sent(sent.get())) {
        FERRY_CHECK(c.transport->hand_over(sent.get(), deadline));
        c.sends.push_back(sent);
        return Status::kOk;
      }
      if (now > deadline) return c.transport->wait_all({sent.get()}, deadline);
    }
    if (polls % 64 == 63) sched_yield();
  }
}

int error_of(Status status, MPI_Comm comm, std::int64_t bytes, int world) {
  if (ok(status)) return MPI_SUCCESS;
  FERRY_WARN(Shim, "a %lld-byte message with rank %d of another machine failed on the net transport: %s",
             static_cast<long long>(bytes), world, status_name(status));
  return raise_error(comm, MPI_ERR_OTHER);
}

// Posts e's message and sends its envelope. *handled false: nothing went out.
int start_message(const Eligible& e, int tag, bool now, Completion* completion, bool* handled) {
  *handled = false;
  const int net_tag = take_tag(e.to.world);
  if (!ok(post_message(e, net_tag, now, completion))) return MPI_SUCCESS;
  *handled = true;
  counters().net.fetch_add(1, std::memory_order_relaxed);
  return send_envelope(net_envelope(e, tag, net_tag), e.to.world);
}

// Moves the channel's sends on (their provider requests and pinned chunks
// are given back as they leave): at every completion call.
void progress_sends() {
  NetChannel& c = channel();
  std::unique_lock<std::mutex> lock(c.mutex, std::try_to_lock);
  if (!lock.owns_lock() || !c.transport) return;
  c.sends.erase(std::remove_if(c.sends.begin(), c.sends.end(), [](const auto& s) { return s->done; }),
                c.sends.end());
  bool done = false;
  if (!c.sends.empty()) FERRY_LOG_IF_FAILED(c.transport->test(c.sends.front().get(), &done));
}

// A send whose message is handed to the network whole (post_send_now): the
// user's buffer is free at once, as after a buffered send; the channel keeps
// the message until it has left.
int hand_over(const Eligible& e, int tag, bool* handled) {
  auto sent = std::make_shared<Completion>();
  const int rc = start_message(e, tag, true, sent.get(), handled);
  if (*handled) keep(std::move(sent));
  return rc;
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

bool net_wanted_here() {
  std::vector<std::string> unknown;
  const AllowedTransports allowed =
      allowed_transports(params().transports, params().p2p_disable, params().shm_disable, &unknown);
  return allowed.net && (params().net == "mpi" || params().net == "socket");
}

bool open_net(bool open) {
  if (!open) return false;
  NetChannel& c = channel();
  auto transport = std::make_unique<NetTransport>(static_cast<std::size_t>(std::max<std::int64_t>(params().net_chunk_bytes, 0)),
                                                  static_cast<int>(params().net_chunks));
  Status status = Status::kUnavailable;
  if (params().net == "socket") {
    c.bootstrap = make_mpi_bootstrap(MPI_COMM_WORLD);
    status = c.bootstrap ? transport->connect(*c.bootstrap) : Status::kUnavailable;
  } else {
    std::unique_ptr<NetProvider> provider = make_mpi_network(MPI_COMM_WORLD);
    if (provider) {
      transport->attach(std::move(provider));
      status = Status::kOk;
    }
  }
  if (!ok(status)) {
    FERRY_WARN(Shim, "point-to-point between machines: the %s network did not open (%s); device messages are staged",
               params().net.c_str(), status_name(status));
    c.bootstrap.reset();
    return false;
  }
  int size = 0;
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  c.next_tag.assign(static_cast<std::size_t>(size), 0);
  // As many idle pinned chunks as the staging pool may hold: sends handed
  // over whole take them by the message.
  transport->set_idle_chunk_bytes(static_cast<std::size_t>(std::max<std::int64_t>(params().staging_pool_max_bytes, 0)));
  c.transport = std::move(transport);
  g_open.store(true, std::memory_order_release);
  add_completion_progress(progress_sends);
  FERRY_INFO(Init, "point-to-point on device buffers between machines over the net transport (%s, from %lld bytes)",
             c.transport->provider()->name(), static_cast<long long>(params().net_min_bytes));
  return true;
}

void close_net() {
  if (!g_open.exchange(false)) return;
  NetChannel& c = channel();
  std::vector<Completion*> unfinished;
  for (const auto& sent : c.sends)
    if (!sent->done) unfinished.push_back(sent.get());
  if (!unfinished.empty() && !ok(c.transport->wait_all(unfinished, handshake_deadline())))
    FERRY_WARN(Shim, "MPI_Finalize: %zu device sends to other machines never reached their receives",
               unfinished.size());
  c.transport.reset();
  c.bootstrap.reset();
  c.sends.clear();
}

int net_send(FunctionId id, Mode mode, const Eligible& e, int dest, int tag, MPI_Comm comm, MPI_Request* request,
             bool* handled) {
  if (request) {
    int rc = hand_over(e, tag, handled);
    if (!*handled) return MPI_SUCCESS;
    record_route(id, RouteDecision{Route::kEngine, "net"});
    if (rc == MPI_SUCCESS) rc = send_marker(mode, dest, tag, comm, request);
    return rc == MPI_SUCCESS ? rc : raise_error(comm, rc);
  }
  auto sent = std::make_shared<Completion>();
  int rc = start_message(e, tag, false, sent.get(), handled);
  if (!*handled) return MPI_SUCCESS;
  record_route(id, RouteDecision{Route::kEngine, "net"});
  if (rc == MPI_SUCCESS) rc = send_marker(mode, dest, tag, comm, nullptr);
  const Status status = finish_send(sent);
  if (rc != MPI_SUCCESS) return raise_error(comm, rc);
  return error_of(status, comm, e.bytes, e.to.world);
}

int net_sendrecv(const Eligible& e, int dest, int tag, const std::function<int()>& receive, MPI_Comm comm,
                 bool* handled) {
  auto sent = std::make_shared<Completion>();
  int rc = start_message(e, tag, false, sent.get(), handled);
  if (!*handled) return MPI_SUCCESS;
  record_route(FunctionId::kSendrecv, RouteDecision{Route::kEngine, "net"});
  if (rc == MPI_SUCCESS) rc = send_marker(Mode::kStandard, dest, tag, comm, nullptr);
  // Receiving moves the channel, this message too.
  const int received = rc == MPI_SUCCESS ? receive() : MPI_SUCCESS;
  const Status status = finish_send(sent);
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
  Completion arrived;
  Status received;
  {
    NetChannel& c = channel();
    std::lock_guard<std::mutex> lock(c.mutex);
    received = g_open.load(std::memory_order_acquire)
                   ? c.transport->post_recv(world, into, static_cast<std::size_t>(bytes), env.reply_tag, &arrived)
                   : Status::kUnavailable;
  }
  if (ok(received)) received = wait_for(&arrived);
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
