// A network between the ranks of a group, as the net transport
// (net_transport.h) uses it: two-sided messages of host memory, in the spirit
// of NCCL's net plugin. Providers: the application's MPI on a private
// communicator (engine/bootstrap/mpi_network.h, which its bootstrap opens),
// TCP sockets (socket_network.h) and rdma-core's verbs (ib_network.h).
//
// Contract: messages from one rank to another with one tag are received in
// the order they were posted (as MPI's non-overtaking rule); a receive takes
// exactly the bytes of the send it matches. A provider is used by one thread
// at a time (the caller of the engine's call drives it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/common/status.h"

namespace ferry {

// A posted send or receive, until test() says it is done (then released).
struct NetRequest {
  void* handle = nullptr;
};

class NetProvider {
 public:
  virtual ~NetProvider() = default;
  // Lower case, as FERRY_NET names it: mpi, socket, ib.
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data stays untouched (send) or unread (receive) until done.
  virtual Status post_send(int peer, int tag, const void* data, std::size_t bytes, NetRequest* request) = 0;
  virtual Status post_recv(int peer, int tag, void* data, std::size_t bytes, NetRequest* request) = 0;
  // *done once request's message has left (send) or arrived (receive); the
  // request is then released.
  virtual Status test(NetRequest* request, bool* done) = 0;
  // Abandons a request that will not complete (a failed call): releases
  // what it holds here; the peer's side is not told.
  virtual void cancel(NetRequest* request) = 0;

  // Memory [data, data + bytes) the caller keeps for many messages (the net
  // transport's pinned chunks) until forget_memory: a provider may keep it
  // registered with its device meanwhile. Other memory it registers for one
  // message at a time.
  virtual void remember_memory(const void* /*data*/, std::size_t /*bytes*/) {}
  // Device memory [data, data + bytes) that one message is about to move:
  // true where the provider takes it straight from there (registered with
  // its device: GPUDirect RDMA) until forget_memory; false where the caller
  // is to stage it through host memory.
  virtual bool remember_device_memory(const void* /*data*/, std::size_t /*bytes*/) { return false; }
  virtual void forget_memory(const void* /*data*/, std::size_t /*bytes*/) {}
};

}  // namespace ferry
