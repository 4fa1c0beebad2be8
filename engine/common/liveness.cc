#include "engine/common/liveness.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "engine/common/host_name.h"
#include "engine/common/params.h"

namespace ferry {

std::chrono::steady_clock::time_point handshake_deadline() {
  if (params().handshake_timeout <= 0) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + std::chrono::seconds(params().handshake_timeout);
}

namespace {

std::mutex g_ended_mutex;
std::string g_ended;

}  // namespace

bool process_alive(int pid) { return pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH; }

void PeerLiveness::watch(std::vector<std::int32_t> pids) {
  for (std::int32_t& pid : pids)
    if (!process_alive(pid)) pid = 0;
  pids_ = std::move(pids);
}

int PeerLiveness::ended_rank() {
  const auto now = std::chrono::steady_clock::now();
  if (pids_.empty() || now < next_look_) return -1;
  next_look_ = now + std::chrono::milliseconds(100);
  for (int rank = 0; rank < static_cast<int>(pids_.size()); ++rank)
    if (!process_alive(pids_[rank])) return rank;
  return -1;
}

void note_ended_peer(int rank, int size, std::int32_t pid) {
  std::lock_guard<std::mutex> lock(g_ended_mutex);
  g_ended = "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ") of a communicator of " +
            std::to_string(size) + " ranks on " + host_name();
}

void note_lost_peer(int rank, int size) {
  std::lock_guard<std::mutex> lock(g_ended_mutex);
  g_ended = "rank " + std::to_string(rank) + " of a group of " + std::to_string(size) +
            " ranks, on another machine (its connection closed)";
}

std::string last_ended_peer() {
  std::lock_guard<std::mutex> lock(g_ended_mutex);
  return g_ended;
}

}  // namespace ferry
