// The net transport (transport.h) between ranks of different machines, over
// a network provider (net.h). Two-sided: a send and its receive move bytes of
// host or device memory; device memory is pipelined through pinned host
// chunks (the copy of one chunk to or from the device overlaps the network
// transfer of others), unless the provider takes it straight
// (remember_device_memory: GPUDirect RDMA on ib).
//
// Framing: a message of B bytes travels as ceil(B / chunk) provider messages
// of at most chunk bytes, whatever memory either side holds, so the two
// sides need only agree on B. Messages to one peer with one tag are matched
// in posting order; several of them may be in flight at once.
//
// Driven by test() on the caller's thread (the mpi provider allows no other).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "engine/transport/net.h"
#include "engine/transport/transport.h"

namespace ferry {

// Bytes moved by the net transport since load (FERRY_STATS).
struct NetTraffic {
  std::uint64_t sent_bytes;
  std::uint64_t received_bytes;
  std::uint64_t straight_device_messages;  // device memory on the network without host copies
};
NetTraffic net_traffic();

// The ib provider between the bootstrap's ranks where `provider` (as
// FERRY_NET names it; the same on every rank) chooses it: "ib" asks for it
// (what stands in the way is reported and returned), "auto" takes it where
// every rank has a port; kUnavailable for every other provider and where
// the build has no verbs.
Status connect_ib_network(Bootstrap& bootstrap, const std::string& provider, std::unique_ptr<NetProvider>* out);

class NetTransport final : public Transport {
 public:
  // chunk_bytes per provider message, chunks_in_flight per message at once.
  NetTransport(std::size_t chunk_bytes, int chunks_in_flight);
  ~NetTransport() override;

  TransportKind type() const override { return TransportKind::kNet; }
  // Ranks of two machines (the network reaches any other machine).
  bool can_connect(const PeerView& view) const override;
  bool maps_device_memory() const override { return false; }
  // Opens FERRY_NET's provider between the bootstrap's ranks (its peers).
  Status connect(Bootstrap& bootstrap) override;
  // Opens provider (as FERRY_NET names it; the same on every rank): socket;
  // ib; mpi, the network the bootstrap brings; auto: ib where every rank
  // has a port, else the bootstrap's network, else socket. kUnavailable on
  // every rank where the provider cannot serve.
  Status connect(Bootstrap& bootstrap, const std::string& provider);
  // Adopts a provider opened elsewhere (the engine used without MPI).
  void attach(std::unique_ptr<NetProvider> provider) { provider_ = std::move(provider); }
  const NetProvider* provider() const { return provider_.get(); }

  // One-sided access across machines is not served yet: kUnsupported.
  Status register_memory(const void*, std::size_t, MemoryKey*) override { return Status::kUnsupported; }
  Status map(int, const MemoryKey&, void**) override { return Status::kUnsupported; }
  void unmap(int, const MemoryKey&) override {}
  Status post_write(int, const void*, const MemoryKey&, std::size_t, std::size_t, Completion*) override {
    return Status::kUnsupported;
  }
  Status post_signal(int, const MemoryKey&, std::size_t, std::uint64_t, Completion*) override {
    return Status::kUnsupported;
  }

  Status post_send(int peer, const void* local, std::size_t bytes, int tag, Completion* completion) override;
  Status post_recv(int peer, void* local, std::size_t bytes, int tag, Completion* completion) override;
  // A send that needs no more calls here to reach its receive: every chunk
  // is copied out of the device and handed to the network before it
  // returns (pinned chunks for the whole message), so a provider that moves
  // data by itself (the MPI's progress, the socket threads) delivers it
  // while this process is elsewhere. test() still reports it done. kTimeout
  // at deadline (then as wait_all).
  Status post_send_now(int peer, const void* local, std::size_t bytes, int tag, Completion* completion,
                       std::chrono::steady_clock::time_point deadline);
  // Whether a chunk of completion's send has left (with the mpi provider:
  // its receive has taken it), or the send is done.
  bool any_sent(const Completion* completion) const;
  // Hands the rest of a send posted by post_send to the network at once, as
  // post_send_now would have.
  Status hand_over(Completion* completion, std::chrono::steady_clock::time_point deadline);
  // Most bytes of pinned chunks kept idle for later messages (whole sends
  // take many at once); past it they go back to the system. Default: what
  // a few windowed messages use.
  void set_idle_chunk_bytes(std::size_t bytes) { idle_chunk_bytes_ = bytes; }
  // Moves every posted message on; completion must stay valid until done.
  Status test(Completion* completion, bool* done) override;
  // test() until every completion is done, or kTimeout at deadline (then
  // every message in flight is abandoned and the transport refuses more).
  Status wait_all(std::initializer_list<Completion*> completions, std::chrono::steady_clock::time_point deadline);
  Status wait_all(const std::vector<Completion*>& completions, std::chrono::steady_clock::time_point deadline);

 private:
  struct Message;
  struct Chunk;
  // Pinned host chunks, reused from message to message.
  Status take_chunk(gpu::Backend* backend, Chunk* chunk);
  void return_chunk(Chunk* chunk);
  // A message in (send: out of) local, queued and moved on as far as it goes.
  // window: chunks in flight at once (0: chunks_in_flight_).
  Status post(bool send, int peer, void* local, std::size_t bytes, int tag, Completion* completion,
              std::size_t window = 0);
  Status progress();
  Message* find(const Completion* completion);
  // Moves messages on until completion's send has posted every chunk.
  Status post_all(Completion* completion, std::size_t bytes, std::chrono::steady_clock::time_point deadline);
  // may_post: every earlier message of its queue has posted all its chunks;
  // room: chunks it may have in flight (its window, less what earlier
  // messages of its queue have in flight).
  Status progress_send(Message& message, bool may_post, std::size_t room);
  Status progress_recv(Message& message, bool may_post, std::size_t room);
  Status stream_for(Message& message, gpu::Stream* stream);
  void abandon(Status why);

  std::size_t chunk_bytes_;
  int chunks_in_flight_;
  std::size_t idle_chunk_bytes_;
  std::unique_ptr<NetProvider> provider_;
  std::list<Message> messages_;  // in posting order
  struct PinnedChunk {
    gpu::Backend* backend;
    void* host;
  };
  std::vector<PinnedChunk> idle_chunks_;
  std::vector<PinnedChunk> lost_chunks_;  // a network may still touch them: freed at close
  struct CopyStream {
    gpu::Backend* backend;
    int device;
    gpu::Stream stream;
  };
  std::vector<CopyStream> streams_;
  std::vector<std::pair<gpu::Backend*, gpu::Event>> idle_events_;
  Status broken_ = Status::kOk;
};

}  // namespace ferry
