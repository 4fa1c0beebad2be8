// Whether the processes a wait depends on still run. A peer process of this
// machine that ended (killed, crashed) is noticed by its pid within a
// fraction of a second, so a waiting call returns an error naming it
// instead of spinning until FERRY_HANDSHAKE_TIMEOUT. Peers on other
// machines are the connection's to notice.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

// FERRY_HANDSHAKE_TIMEOUT from now (0: no limit): how long Ferry waits for
// its peers.
std::chrono::steady_clock::time_point handshake_deadline();

// False only when no process with this pid exists here any more.
bool process_alive(int pid);

class PeerLiveness {
 public:
  // By rank: the pid of each peer on this machine, 0 for the others (and
  // for this process). Called while every peer runs: a pid not seen here
  // then belongs to another pid namespace (containers sharing a machine)
  // and is not watched, so it is never taken for an ended process.
  void watch(std::vector<std::int32_t> pids);

  // The first watched rank whose process has ended, or -1; looks at most
  // every 100 ms (-1 in between), so a wait loop may call it every round.
  int ended_rank();
  std::int32_t pid_of(int rank) const { return pids_[rank]; }

 private:
  std::vector<std::int32_t> pids_;
  std::chrono::steady_clock::time_point next_look_{};
};

// The last peer a wait found ended, for the error the caller returns; set
// by note_ended_peer, e.g. "rank 1 (pid 4242) of a communicator of 2 ranks
// on vm".
void note_ended_peer(int rank, int size, std::int32_t pid);
// The same for a peer on another machine whose connection closed.
void note_lost_peer(int rank, int size);
std::string last_ended_peer();

}  // namespace ferry
