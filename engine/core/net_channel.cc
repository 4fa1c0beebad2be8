#include "engine/core/net_channel.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "engine/common/liveness.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/transport/net_transport.h"
#include "engine/transport/socket_network.h"
#ifdef FERRY_HAVE_IBVERBS
#include "engine/transport/ib_network.h"
#endif

namespace ferry {

std::string net_setting_problem() {
  if (params().net == "socket") return socket_interface_problem(params().socket_ifname);
  if (params().net != "ib" && (params().net != "auto" || params().ib_hca.empty())) return {};
#ifdef FERRY_HAVE_IBVERBS
  std::string why;
  if (ib_port_here(&why)) return {};
  // auto with FERRY_IB_HCA set: a choice that matches nothing is worth a
  // word; a machine without RDMA devices is not.
  if (params().net == "auto" && why.find("FERRY_IB_HCA") == std::string::npos) return {};
  return "FERRY_NET=" + params().net + ": " + why;
#else
  if (params().net == "auto") return {};
  return "FERRY_NET=ib: this build has no ib provider (no infiniband/verbs.h when it was built)";
#endif
}

std::string net_provider_here() {
  if (params().net != "auto") return params().net;
#ifdef FERRY_HAVE_IBVERBS
  std::string why;
  if (ib_port_here(&why)) return "ib";
#endif
  return "mpi";
}

struct NetChannel::Send {
  Completion completion;
};

Status NetChannel::open(std::unique_ptr<Bootstrap> bootstrap, const std::string& provider, std::size_t chunk_bytes,
                        int chunks_in_flight, std::size_t idle_chunk_bytes, std::unique_ptr<NetChannel>* out) {
  if (!bootstrap) return Status::kInvalidArgument;
  auto transport = std::make_unique<NetTransport>(chunk_bytes, chunks_in_flight);
  FERRY_CHECK(transport->connect(*bootstrap, provider));
  *out = std::unique_ptr<NetChannel>(new NetChannel(std::move(transport), idle_chunk_bytes));
  (*out)->bootstrap_ = std::move(bootstrap);
  return Status::kOk;
}

Status NetChannel::open(std::unique_ptr<NetProvider> provider, std::size_t chunk_bytes, int chunks_in_flight,
                        std::size_t idle_chunk_bytes, std::unique_ptr<NetChannel>* out) {
  if (!provider) return Status::kInvalidArgument;
  auto transport = std::make_unique<NetTransport>(chunk_bytes, chunks_in_flight);
  transport->attach(std::move(provider));
  *out = std::unique_ptr<NetChannel>(new NetChannel(std::move(transport), idle_chunk_bytes));
  return Status::kOk;
}

NetChannel::NetChannel(std::unique_ptr<NetTransport> transport, std::size_t idle_chunk_bytes)
    : transport_(std::move(transport)), next_tag_(static_cast<std::size_t>(transport_->provider()->size()), 0) {
  transport_->set_idle_chunk_bytes(idle_chunk_bytes);
}

void NetChannel::forget_sent_locked() {
  kept_.erase(std::remove_if(kept_.begin(), kept_.end(), [](const auto& s) { return s->completion.done; }),
              kept_.end());
}

NetChannel::~NetChannel() {
  std::vector<Completion*> unfinished;
  for (const auto& send : kept_)
    if (!send->completion.done) unfinished.push_back(&send->completion);
  if (!unfinished.empty() && !ok(transport_->wait_all(unfinished, handshake_deadline())))
    FERRY_WARN(Transport, "net: %zu sends never reached their receives", unfinished.size());
  // The transport goes before the bootstrap its provider may stand on.
  transport_.reset();
}

const char* NetChannel::provider() const { return transport_->provider()->name(); }

int NetChannel::take_tag(int peer) {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(next_tag_.at(static_cast<std::size_t>(peer))++ % kTags);
}

Status NetChannel::start_send(int peer, const void* data, std::size_t bytes, int tag, bool now,
                              std::shared_ptr<Send>* send) {
  auto started = std::make_shared<Send>();
  std::lock_guard<std::mutex> lock(mutex_);
  if (now) {
    FERRY_CHECK(transport_->post_send_now(peer, data, bytes, tag, &started->completion, handshake_deadline()));
    forget_sent_locked();
    if (!started->completion.done) kept_.push_back(started);
  } else {
    FERRY_CHECK(transport_->post_send(peer, data, bytes, tag, &started->completion));
  }
  *send = std::move(started);
  return Status::kOk;
}

Status NetChannel::finish_send(const std::shared_ptr<Send>& send, std::int64_t patience_us) {
  Completion* completion = &send->completion;
  const auto patience = std::chrono::steady_clock::now() + std::chrono::microseconds(patience_us);
  const auto deadline = handshake_deadline();
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bool done = false;
      FERRY_CHECK(transport_->test(completion, &done));
      if (done) return Status::kOk;
      const auto now = std::chrono::steady_clock::now();
      if (now > patience && !transport_->any_sent(completion)) {
        FERRY_CHECK(transport_->hand_over(completion, deadline));
        kept_.push_back(send);
        return Status::kOk;
      }
      if (now > deadline) return transport_->wait_all({completion}, deadline);
    }
    if (polls % 64 == 63) sched_yield();
  }
}

Status NetChannel::receive(int peer, void* data, std::size_t bytes, int tag) {
  Completion arrived;
  const auto deadline = handshake_deadline();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    FERRY_CHECK(transport_->post_recv(peer, data, bytes, tag, &arrived));
  }
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bool done = false;
      FERRY_CHECK(transport_->test(&arrived, &done));
      if (done) return Status::kOk;
      if (polls % 1024 == 1023 && std::chrono::steady_clock::now() > deadline)
        return transport_->wait_all({&arrived}, deadline);
    }
    if (polls % 64 == 63) sched_yield();
  }
}

void NetChannel::progress() {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  forget_sent_locked();
  bool done = false;
  if (!kept_.empty()) FERRY_LOG_IF_FAILED(transport_->test(&kept_.front()->completion, &done));
}

}  // namespace ferry
