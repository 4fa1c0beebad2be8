#include "mpi_shim/peer_envelopes.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "engine/collectives/collectives.h"
#include "engine/common/log.h"
#include "engine/common/trace.h"

namespace ferry::shim::peer {

namespace {

struct Channels {
  // Messages to a receiver: envelopes, and a withdrawn offer's bounce
  // envelope (on its reply tag).
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Comm answers = MPI_COMM_NULL;  // see answers()
  int tag_ub = 32767;
  std::atomic<std::uint32_t> replies{0};
  std::mutex mutex;
  std::unordered_map<int, std::deque<Envelope>> queued;  // by world rank of the sender
  PeerMemory memory{true};
};

Channels& channels() {
  static auto* c = new Channels;
  return *c;
}

}  // namespace

bool open_channels() {
  Channels& c = channels();
  if (PMPI_Comm_dup(MPI_COMM_WORLD, &c.control) != MPI_SUCCESS) return false;
  PMPI_Comm_set_errhandler(c.control, MPI_ERRORS_RETURN);
  if (PMPI_Comm_dup(MPI_COMM_WORLD, &c.answers) != MPI_SUCCESS) {
    PMPI_Comm_free(&c.control);
    return false;
  }
  PMPI_Comm_set_errhandler(c.answers, MPI_ERRORS_RETURN);
  void* tag_ub = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found) == MPI_SUCCESS && found)
    c.tag_ub = *static_cast<int*>(tag_ub);
  return true;
}

void close_channels() {
  Channels& c = channels();
  PMPI_Comm_free(&c.control);
  PMPI_Comm_free(&c.answers);
}

MPI_Comm answers() { return channels().answers; }

int next_reply_tag() {
  Channels& c = channels();
  const std::uint32_t span = static_cast<std::uint32_t>(c.tag_ub - kFirstReplyTag + 1);
  return kFirstReplyTag + static_cast<int>(c.replies.fetch_add(1, std::memory_order_relaxed) % span);
}

bool valid_tag(int tag) { return tag >= 0 && tag <= channels().tag_ub; }

int send_envelope(const Envelope& env, int world, int tag) {
  Envelope sent = env;
  sent.flow_id = 0;
  if (trace_enabled() && tag == kEnvelopeTag) {
    sent.flow_id = trace_new_flow_id();
    trace_flow_start(sent.flow_id);
  }
  return PMPI_Send(&sent, sizeof(sent), MPI_BYTE, world, tag, channels().control);
}

int receive_envelope(int world, int tag, Envelope* out) {
  return PMPI_Recv(out, sizeof(*out), MPI_BYTE, world, tag, channels().control, MPI_STATUS_IGNORE);
}

// Envelopes are received only under the lock, in the order they came, and
// never by a blocking receive: another thread may queue the one this
// thread waits for (MPI_THREAD_MULTIPLE).
int find_envelope(int world, std::uint64_t comm_id, int tag, bool peek, Envelope* out) {
  Channels& c = channels();
  const auto gives_up = handshake_deadline();
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      std::deque<Envelope>& queue = c.queued[world];
      for (auto it = queue.begin(); it != queue.end(); ++it) {
        if (it->comm_id != comm_id || it->tag != tag) continue;
        *out = *it;
        if (!peek) queue.erase(it);
        return MPI_SUCCESS;
      }
      int arrived = 0;
      int rc = PMPI_Iprobe(world, kEnvelopeTag, c.control, &arrived, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS && arrived) {
        Envelope next;
        rc = PMPI_Recv(&next, sizeof(next), MPI_BYTE, world, kEnvelopeTag, c.control, MPI_STATUS_IGNORE);
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

PeerMemory& peer_memory() { return channels().memory; }

}  // namespace ferry::shim::peer
