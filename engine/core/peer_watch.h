// Device waits for peers (ring and tree steps, LL lines) spin on words a
// peer writes, where nothing can ask whether the peer still runs. While a
// PeerWatch lives, one thread of this process looks at the watched peers'
// pids every 100 ms (PeerLiveness, liveness.h); once one has ended it notes
// the peer (note_ended_peer) and raises the abandon word, which every device
// wait of this process polls beside its deadline. The waits then give up and
// their calls return kPeerEnded within a fraction of a second instead of
// after FERRY_HANDSHAKE_TIMEOUT. A job with a dead rank cannot go on (the
// real MPI cannot finish it), so one word serves every communicator.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/common/liveness.h"
#include "engine/common/status.h"
#include "engine/gpu/gpu.h"

namespace ferry {

class PeerWatch {
 public:
  // pids by rank: this machine's peers, 0 for the others and this process
  // (the list PeerLiveness::watch takes).
  explicit PeerWatch(std::vector<std::int32_t> pids);
  // Once it returns, the watcher no longer looks at these pids.
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // The watcher's look: the first watched rank whose process has ended
  // (noted for the caller's error, note_ended_peer), or -1.
  int ended_rank();

 private:
  PeerLiveness liveness_;
  int size_;
};

// The abandon word where backend's kernels can read it (pinned host memory,
// made at the first call for that backend and never freed; on the emulated
// device, host memory), holding 1 once a watched peer has ended; nullptr
// when it cannot be made.
const std::uint32_t* abandon_word(gpu::Backend* backend);

// Whether device waits were abandoned: a watched peer has ended.
bool device_waits_abandoned();

// A device wait's result as the caller reports it: a wait that gave up
// (kTimeout) after the abandon word rose is kPeerEnded.
Status abandoned_or(Status waited);

}  // namespace ferry
