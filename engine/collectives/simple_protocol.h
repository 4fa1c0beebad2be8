// The Simple protocol: ring, tree and chain schedules (schedule.h) carried out over
// FIFOs of large slots in each receiver's device memory. A sender stores a
// piece of data into its next slot at the receiver (over NVLink when the
// receiver is a peer GPU), then raises the slot's tail counter; the receiver
// waits for the tail, reads the slot, and raises the sender's head counter
// to free it. The application's buffers are never mapped by a peer.
//
// Schedules are compiled into steps: a receive fused with the sends of the
// value it produced (NCCL's recvReduceSend and friends), so each piece of
// data is read and written once per hop. Every rank runs the same steps for
// each region of the buffer; regions are dealt to channels (thread blocks)
// in turn, each channel with FIFOs of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/executor.h"
#include "engine/core/reduce_common.h"
#include "engine/collectives/schedule.h"
#include "engine/collectives/tuner.h"
#include "engine/common/types.h"
#include "engine/gpu/gpu.h"

namespace ferry {

constexpr int kSimpleSlots = 4;                           // FIFO depth per channel and sender
constexpr std::size_t kSimpleSlotBytes = std::size_t{128} << 10;
constexpr std::size_t kSimpleMinPieceBytes = std::size_t{16} << 10;
constexpr int kSimpleMaxChannels = 64;
constexpr int kSimpleMaxSends = 2;                        // destinations of one step's value
// A channel works on this many regions at once, step by step in turn, so
// that while one region waits for a peer the others move data. Fewer than
// kSimpleSlots: a step that receives and sends needs a free slot first, so
// with as many regions in flight as slots, two ranks' full FIFOs would wait
// for each other.
constexpr int kSimpleRegionsInFlight = 2;

// One step of a rank, over elements [begin, begin + count) of a region.
// The value is: what arrives from recv_peer (kept as it is, or reduced with
// the local operand), or the local operand alone (recv_peer < 0). It goes
// into the output when store_local, and into each send peer's FIFO.
struct SimpleStep {
  std::uint64_t begin;
  std::uint64_t count;
  std::int16_t recv_peer;
  std::uint8_t reduce;             // with a receive: local op received; else received as it is
  std::uint8_t local_from_output;  // the local operand is in the output (written earlier), not the input
  std::uint8_t store_local;
  std::uint8_t nsends;
  std::int16_t send_peers[kSimpleMaxSends];
};
static_assert(sizeof(SimpleStep) == 32, "steps are copied to the device as an array");

// Fuses a schedule's operations into steps and decides, for every step,
// where its local operand lives and whether its value must be stored (a
// value that the next touch of its range overwrites is only forwarded).
// kInternal when a range is partly written when read (no schedule here
// does that).
Status compile_simple_steps(const Schedule& schedule, std::vector<SimpleStep>* steps);

// A rank's steps for a whole allreduce: the regions of region_elements,
// the last one possibly shorter (its own steps), dealt to channels in turn.
struct SimplePlan {
  std::vector<SimpleStep> steps;  // a full region's, then the last region's
  std::uint32_t full_steps = 0;
  std::uint32_t last_steps = 0;
  std::size_t region_elements = 0;
  std::size_t regions = 0;
};

// The bytes of one piece (a step's data) for a call of bytes cut into
// parts per region (n ring slices, 2 tree halves): small enough that every
// channel gets kSimpleRegionsInFlight regions, at least
// kSimpleMinPieceBytes (below, a step's hand-off costs more than its data)
// and at most a slot.
std::size_t simple_piece_bytes(std::size_t bytes, int parts, int channels);

// What runs over the Simple protocol.
enum class SimpleCollective : int { kRingAllreduce, kTreeAllreduce, kChainBcast };

// The ring (ranks in order) or the double binary tree over ranks 0..n-1 for
// allreduce, or the chain from root along the ring for bcast (elements of
// one byte), in pieces of simple_piece_bytes.
Status plan_simple(SimpleCollective collective, int rank, int nranks, int root, std::size_t count,
                   std::size_t element_bytes, int channels, SimplePlan* plan);

// The ranks that send to rank in the ring or the trees (sorted): each has
// one FIFO per channel in rank's buffer.
std::vector<int> simple_senders(int rank, int nranks);

// Counters of one channel in a rank's buffer, one of each per rank. tail
// and head are written by peers; sent and taken only by the rank itself,
// and all of them carry over from call to call.
struct SimpleControl {
  std::uint64_t* tail;   // by sender: pieces it stored here
  std::uint64_t* head;   // by receiver: pieces of this rank's it took
  std::uint64_t* sent;   // by receiver: pieces this rank stored there
  std::uint64_t* taken;  // by sender: pieces this rank took
};

// A channel's counters are laid out for at least this many ranks, so that
// channels' blocks stay apart (576 bytes), then 8 words unused.
constexpr int kSimpleControlRanks = 16;
FERRY_HOST_DEVICE std::size_t simple_control_stride(int nranks) {
  return (4 * static_cast<std::size_t>(nranks > kSimpleControlRanks ? nranks : kSimpleControlRanks) + 8) *
         sizeof(std::uint64_t);
}
static_assert((4 * kSimpleControlRanks + 8) * sizeof(std::uint64_t) == 576, "the control block layout");
// The counters of every channel, at the start of a rank's buffer.
FERRY_HOST_DEVICE std::size_t simple_control_bytes(int nranks) {
  return kSimpleMaxChannels * simple_control_stride(nranks);
}
// Channel's counters in a rank's buffer (the same layout on every rank).
FERRY_HOST_DEVICE SimpleControl simple_control(void* buffer, int channel, int nranks) {
  auto* words = reinterpret_cast<std::uint64_t*>(static_cast<char*>(buffer) + channel * simple_control_stride(nranks));
  const int n = nranks > kSimpleControlRanks ? nranks : kSimpleControlRanks;
  return {words, words + n, words + 2 * n, words + 3 * n};
}

// Bytes of a rank's buffer among nranks with nsenders FIFOs per channel.
std::size_t simple_buffer_bytes(int nranks, int channels, int nsenders);

// What each rank's buffer is to a rank's kernel: the buffer, mapped here,
// and the FIFO indices between the two.
struct SimplePeer {
  void* buffer;
  std::int32_t nsenders;  // FIFOs per channel in the buffer
  std::int32_t fifo_at;   // this rank's FIFO index there (-1: none)
  std::int32_t own_fifo;  // that rank's FIFO index in this rank's buffer (-1: none)
  std::int32_t reserved;
};

// What the executor gets (one kernel, a block per channel).
struct SimpleArgs {
  const SimpleStep* steps;  // device memory: plan.steps
  std::uint32_t full_steps;
  std::uint32_t last_steps;
  std::uint64_t region_elements;
  std::uint64_t regions;
  const void* input;
  void* output;
  DataType type;
  ReduceOp op;
  std::int32_t rank;
  std::int32_t nranks;
  std::int32_t channels;
  std::int32_t group;  // regions in flight per channel (below kSimpleSlots)
  std::uint32_t timeout_ms;
  std::int32_t* failed;  // host memory the device writes: a Status, when a wait timed out
  const std::uint32_t* abandon;  // host memory: nonzero once a peer has ended (peer_watch.h); may be null
  // Every rank's: the first kInlineRanks inline, past them from peer_table
  // (device memory the communicator keeps: Communicator::SimpleChannels).
  SimplePeer peers[kInlineRanks];
  const SimplePeer* peer_table;
};

// The (region, step) pairs a channel runs, in order: its regions (channel,
// channel + channels, ...) taken group at a time, the group's steps
// interleaved: step 0 of each, then step 1 of each, ... The last region
// runs alone: its steps may differ from rank to rank (empty slices are left
// out), so interleaved with others its pieces could leave a rank in another
// order than its peer takes them. SimpleProtocol.* checks the order for
// every rank count.
// How many regions, from first on (stride apart), make one group.
FERRY_HOST_DEVICE int simple_group_members(std::uint64_t first, std::uint64_t regions, std::uint64_t stride,
                                           int group) {
  int members = 1;
  while (members < group && first + members * stride + 1 < regions) ++members;
  return members;
}

struct SimpleStepRef {
  std::uint64_t region;
  std::uint32_t step;
};
std::vector<SimpleStepRef> simple_step_order(std::uint64_t regions, std::uint32_t full_steps,
                                             std::uint32_t last_steps, int channel, int channels, int group);

// Where FIFO slot `slot` of sender index fifo on channel lives in a buffer.
FERRY_HOST_DEVICE std::size_t simple_slot_offset(int nranks, int channel, int nsenders, int fifo, int slot) {
  return simple_control_bytes(nranks) +
         ((static_cast<std::size_t>(channel) * nsenders + fifo) * kSimpleSlots + slot) * kSimpleSlotBytes;
}

// Launches the kernel on stream (CUDA), or runs the steps now (emulated).
Status launch_simple(gpu::Backend* backend, const SimpleArgs& args, gpu::Stream stream);

// Runs the steps on the emulated device: channel after channel on the
// calling thread (channels are independent, and every rank takes them in
// the same order).
Status run_simple_on_host(gpu::Backend* backend, const SimpleArgs& args);

#ifdef FERRY_HAVE_GPU_KERNELS
Status gpu_launch_simple(const SimpleArgs& args, gpu::Stream stream);
#endif

}  // namespace ferry
