#include "mpi_shim/peer_receive.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/collectives/collectives.h"
#include "engine/common/liveness.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/core/traffic.h"
#include "mpi_shim/peer_bounce.h"
#include "mpi_shim/peer_claims.h"
#include "mpi_shim/peer_comms.h"
#include "mpi_shim/peer_message.h"
#include "mpi_shim/peer_net.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"

namespace ferry::shim::peer {

namespace {

gpu::Backend* backend_of(gpu::BackendKind kind) { return gpu::owner_backend({gpu::MemoryKind::kDevice, kind}); }

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
  const std::string& leading = params().gpu_leader;
  if (leading == "off" || world >= world_rank() || bytes == 0) return Status::kUnavailable;
  const gpu::PointerInfo mine = gpu::classify(dst);
  gpu::Backend* backend = gpu::owner_backend(mine);
  if (!backend || mine.kind != gpu::MemoryKind::kDevice || gpu::classify(source).device != mine.device ||
      (leading != "on" && !backend->processes_take_turns(mine.device)))
    return Status::kUnavailable;
  PushRequest* request = peer_push_request(env);
  if (!request || !ok(peer_memory().export_buffer(dst, mine, &request->destination))) return Status::kUnavailable;
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

}  // namespace

int unpack_message(MPI_Comm comm, void* buf, int count, MPI_Datatype type, const Extent& extent,
                   std::int64_t capacity, std::int64_t delivered,
                   const std::function<Status(void*, std::size_t)>& fetch, Status* copied) {
  // The packed form starts as buf's own contents, so a last element that
  // arrived in part keeps the rest of its bytes.
  Staging staging(FunctionId::kRecv, comm);
  void* image = staging.receive(buf, extent, type);
  std::vector<char> packed(static_cast<std::size_t>(capacity));
  int position = 0;
  if (staging.failed()) return staging.raise();
  int error = PMPI_Pack(image, count, type, packed.data(), static_cast<int>(capacity), &position, MPI_COMM_SELF);
  if (error == MPI_SUCCESS) *copied = fetch(packed.data(), static_cast<std::size_t>(delivered));
  position = 0;
  if (error == MPI_SUCCESS && ok(*copied))
    error = PMPI_Unpack(packed.data(), static_cast<int>(capacity), &position, image, count, type, MPI_COMM_SELF);
  MPI_Status unpacked{};
  PMPI_Status_set_elements_x(&unpacked, MPI_BYTE, delivered);
  if (error == MPI_SUCCESS && ok(*copied)) staging.received(unpacked);
  return staging.finish(error);
}

// Straight into buf when buf is one range in packed order, else through
// host memory and MPI_Pack/MPI_Unpack.
int receive_message(MPI_Comm comm, const Envelope& env, int world, void* buf, int count, MPI_Datatype type,
                    MPI_Status* status) {
  if (env.kind == EnvelopeKind::kNet) return receive_net_message(comm, env, world, buf, count, type, status);
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
      const int rc = receive_envelope(world, env.reply_tag, &bounced);
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
    host_source = map_host_bounce(env);
    if (host_source) copied = Status::kOk;
  } else if (backend) {
    copied = peer_memory().pin_buffer(env.buffer, &source);
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
    counters().pushed.fetch_add(ok(pushed), std::memory_order_relaxed);
  } else if (ok(copied) && delivered > 0 && dense) {
    copied = fetch(static_cast<char*>(buf) + extent.lb, delivered);
  } else if (ok(copied) && delivered > 0) {
    error = unpack_message(comm, buf, count, type, extent, capacity, delivered, fetch, &copied);
  }
  if (pinned) peer_memory().unpin_buffer(env.buffer);
  if (ok(copied) && delivered > 0 && stats_enabled())
    count_traffic(on_host ? TransportKind::kShm : TransportKind::kP2p, static_cast<std::uint64_t>(delivered));
  // Acknowledged in every case, so the sender's buffer is not held.
  int replied = MPI_SUCCESS;
  if (claim) {
    claim->store(claim_word(env.claim_ticket, kClaimDone), std::memory_order_release);
    if (env.reply_when_copied) replied = PMPI_Send(nullptr, 0, MPI_BYTE, world, env.reply_tag, answers());
  } else {
    const std::int32_t reply = copied == Status::kTimeout ? kFailed : kCopied;
    replied = PMPI_Send(&reply, 1, MPI_INT32_T, world, env.reply_tag, answers());
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

}  // namespace ferry::shim::peer
