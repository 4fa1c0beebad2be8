// Bounce buffers of point-to-point through peer memory: device memory a
// send's data is copied to, so the send completes at once (the receive
// copies it out whenever it completes, as MPI's progress rule needs) and
// the user may reuse the buffer; host ones (host_bounce.h) for a withdrawn
// offer when no device one is free. This process's pool of them, the sends
// whose receives have not acknowledged their buffer yet, and the chunk
// protocol both sides follow: the sender's copies fill a buffer chunk by
// chunk, each raising a word the receive's copies wait for.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "engine/gpu/gpu.h"
#include "mpi_shim/host_bounce.h"
#include "mpi_shim/peer_envelopes.h"

namespace ferry::shim::peer {

// A bounce buffer: a page for the word that says how far it is filled,
// then the data (whole 2 MiB pages, which copy engines fill fastest).
constexpr std::size_t kBounceHeader = std::size_t{2} << 20;

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
// bounce buffer or a host one; reply is the receive of the acknowledgement.
struct SendInFlight {
  MPI_Request reply;
  Bounce* bounce;
  HostBounce* host = nullptr;
};

// This process's pool, locked while a LockedBounces lives: a send through
// a bounce buffer holds it from taking the buffer until its marker is sent.
class LockedBounces {
 public:
  LockedBounces();
  LockedBounces(const LockedBounces&) = delete;
  LockedBounces& operator=(const LockedBounces&) = delete;

  // Finishes the sends whose receives acknowledged them: their bounce
  // buffers are free again (a device one whose receive gave up is retired).
  void reap();
  // A free bounce buffer of at least bytes on device, from the pool or new;
  // nullptr when FERRY_PT2PT_BOUNCE_BYTES would be exceeded or allocation
  // fails.
  Bounce* take(gpu::Backend* backend, int device, std::size_t bytes);
  // A host bounce buffer of at least bytes within
  // FERRY_PT2PT_HOST_BOUNCE_BYTES, or nullptr. nonce names this process's
  // segments, the first time one is taken.
  HostBounce* take_host(std::size_t bytes, std::uint64_t nonce);
  void give_back(Bounce* bounce) { bounce->busy = false; }
  void give_back(HostBounce* host) { host->busy = false; }
  // Keeps send until its acknowledgement (send.reply) comes.
  void keep(const SendInFlight& send);

 private:
  std::lock_guard<std::mutex> lock_;
};

// Queues the copies of bytes at data into the bounce buffer, chunk by chunk,
// each followed by the header word a receive waits for; or, where streams
// cannot write such words, copies it all now. Fills in env's chunk fields.
Status fill_bounce(Bounce& bounce, const void* data, Envelope* env);

// Copies the first length bytes of env's message out of its bounce buffer
// (or offered send buffer), mapped at bounce, to dst (any memory): chunk by
// chunk on a stream that waits for the sender's copies. Bounded by
// FERRY_HANDSHAKE_TIMEOUT: then the bounce buffer's word is raised past
// every chunk, so the stream drains, and the sender retires the buffer
// (kFailed).
Status copy_out(gpu::Backend* backend, const Envelope& env, void* bounce, void* dst, std::size_t length);

// What this process's host bounce buffers are named by (once take_host
// made the first).
std::uint64_t host_bounces_nonce();

// The data of a kHostBounce envelope's host bounce buffer, mapped here;
// nullptr if it cannot be.
const void* map_host_bounce(const Envelope& env);

// At MPI_Finalize: waits (up to FERRY_HANDSHAKE_TIMEOUT) for the
// acknowledgements of the sends in flight, then frees the idle buffers.
void drain_bounces();

}  // namespace ferry::shim::peer
