// MPI 4.0's partitioned point-to-point on device buffers, staged: the real
// MPI's partitioned request runs on a pinned host copy of the whole buffer,
// and the copies go partition by partition, when the application says a
// partition is ready or asks whether one arrived:
// - a send partition is copied to the host at its MPI_Pready (or
//   MPI_Pready_range, MPI_Pready_list), before the real MPI may read it;
// - a receive partition is copied to the device the first time
//   MPI_Parrived reports it in this round (one MPI_Start to its
//   completion), and every partition not copied yet when the request
//   completes.
// Host buffers pass through. Partitions may be readied and polled from
// several threads at once (MPI_THREAD_MULTIPLE is what partitions are for):
// each copy touches its own partition, and the copied flags are atomic.
#include "mpi_shim/mpi_flavour.h"

#if defined(FERRY_MPI_40)

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "handlers.h"
#include "mpi_shim/request_calls.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

// Where partitions lie in a buffer of partitions * count elements: partition
// p touches bytes [p * stride + first, p * stride + first + bytes) from the
// buffer's pointer, on the device and in the host copy alike.
struct PartitionLayout {
  int partitions = 0;
  std::ptrdiff_t stride = 0;  // count elements' extent
  std::ptrdiff_t first = 0;   // the true lower bound of count elements
  std::size_t bytes = 0;      // their true extent
};

class PartitionedRequest final : public TrackedRequest {
 public:
  PartitionedRequest(std::unique_ptr<Staging> staging, char* device, char* host, const PartitionLayout& layout,
                     bool receive, MPI_Comm comm)
      : TrackedRequest(Lifetime::kPersistent),
        staging_(std::move(staging)),
        device_(device),
        host_(host),
        layout_(layout),
        receive_(receive),
        comm_(comm),
        copied_(receive ? std::make_unique<std::atomic<bool>[]>(layout.partitions) : nullptr) {
    if (receive_) clear_copied();
  }

  bool receive() const { return receive_; }
  bool holds(int partition) const { return partition >= 0 && partition < layout_.partitions; }

  // A send: partitions [low, high] to the host copy, one copy.
  int ready(int low, int high) { return copy_partitions(low, high); }

  // A receive: partition to the device, the first time it is reported.
  int arrived(int partition) {
    if (copied_[partition].exchange(true, std::memory_order_acq_rel)) return MPI_SUCCESS;
    return copy_partitions(partition, partition);
  }

  bool holds_memory_in_flight() const override { return true; }

 private:
  // A receive: the partitions not copied yet, each run of them in one copy.
  int complete(MPI_Status& /*status*/) override {
    if (!receive_) return MPI_SUCCESS;
    for (int low = 0; low < layout_.partitions; ++low) {
      if (copied_[low].exchange(true, std::memory_order_acq_rel)) continue;
      int high = low;
      while (high + 1 < layout_.partitions && !copied_[high + 1].exchange(true, std::memory_order_acq_rel)) ++high;
      if (const int result = copy_partitions(low, high); result != MPI_SUCCESS) return result;
      low = high;
    }
    return MPI_SUCCESS;
  }

  // A new round: nothing received is copied yet; a receive whose type has
  // holes takes the device's bytes for them again (Staging::restart).
  int on_restart() override {
    if (!receive_) return MPI_SUCCESS;
    clear_copied();
    return staging_->restart();
  }

  void clear_copied() {
    for (int p = 0; p < layout_.partitions; ++p) copied_[p].store(false, std::memory_order_relaxed);
  }

  // Partitions [low, high] in one copy: to the host copy for a send, to the
  // device for a receive.
  int copy_partitions(int low, int high) {
    const std::ptrdiff_t from = low * layout_.stride + layout_.first;
    const std::size_t bytes = static_cast<std::size_t>((high - low) * layout_.stride) + layout_.bytes;
    if (receive_) return copy(device_ + from, host_ + from, bytes);
    return copy(host_ + from, device_ + from, bytes);
  }

  int copy(void* dst, const void* src, std::size_t bytes) {
    if (ok(gpu::copy(dst, src, bytes))) return MPI_SUCCESS;
    FERRY_WARN(Stage, "partitioned %s: copying %zu bytes %s the device failed", receive_ ? "receive" : "send", bytes,
               receive_ ? "to" : "from");
    return raise_error(comm_, MPI_ERR_OTHER);
  }

  std::unique_ptr<Staging> staging_;  // holds the host copy
  char* device_;                      // the application's buffer pointer
  char* host_;                        // the same byte in the host copy
  PartitionLayout layout_;
  bool receive_;
  MPI_Comm comm_;  // whose error handler reports a failed copy
  std::unique_ptr<std::atomic<bool>[]> copied_;  // a receive's partitions copied this round (none for a send)
};

// Psend_init and Precv_init: pmpi(buffer) makes the real call on the buffer
// to use. Arguments the staging cannot take go to the real MPI as they are,
// for it to report.
template <typename PmpiInit>
int init_partitioned(FunctionId id, void* buf, int partitions, MPI_Count count, MPI_Datatype type, MPI_Comm comm,
                     MPI_Request* request, bool receive, PmpiInit pmpi) {
  if (partitions > 0 && count > 0) count_bytes(id, static_cast<std::int64_t>(partitions) * count, type);
  if (route_call(id, {buf}, true).route == Route::kPmpi) return pmpi(buf);
  Extent whole, one;
  MPI_Aint lb = 0, extent = 0;
  if (partitions < 1 || count < 0 || comm == MPI_COMM_NULL || !request ||
      !extent_of(static_cast<std::int64_t>(partitions) * count, type, &whole) || !extent_of(count, type, &one) ||
      PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS)
    return pmpi(buf);
  auto staging = std::make_unique<Staging>(id, comm);
  // Only a receive whose type has holes needs the device's bytes first: the
  // copies back cover whole partitions, holes included.
  void* host = receive && !whole.dense ? staging->inout(buf, whole) : staging->out(buf, whole);
  if (staging->failed()) return staging->raise();
  const int result = pmpi(host);
  if (result != MPI_SUCCESS || !staging->staged_any()) return result;
  const PartitionLayout layout{partitions, static_cast<std::ptrdiff_t>(count * extent), one.lb, one.bytes};
  track(*request, std::make_unique<PartitionedRequest>(std::move(staging), static_cast<char*>(buf),
                                                       static_cast<char*>(host), layout, receive, comm));
  return result;
}

// request's object when it is a staged partitioned request of that
// direction.
PartitionedRequest* partitioned(MPI_Request request, bool receive) {
  auto* object = dynamic_cast<PartitionedRequest*>(tracked(request));
  return object && object->receive() == receive ? object : nullptr;
}

}  // namespace

int handle_Psend_init(const void* buf, int partitions, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                      MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return init_partitioned(FunctionId::kPsend_init, const_cast<void*>(buf), partitions, count, datatype, comm, request,
                          false, [&](void* b) {
                            return PMPI_Psend_init(b, partitions, count, datatype, dest, tag, comm, info, request);
                          });
}

int handle_Precv_init(void* buf, int partitions, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                      MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return init_partitioned(FunctionId::kPrecv_init, buf, partitions, count, datatype, comm, request, true,
                          [&](void* b) {
                            return PMPI_Precv_init(b, partitions, count, datatype, source, tag, comm, info, request);
                          });
}

// The ready calls copy before the real MPI may send; partitions out of range
// are the real MPI's to report, so nothing is copied for them.
int handle_Pready(int partition, MPI_Request request) {
  if (PartitionedRequest* send = partitioned(request, false); send && send->holds(partition))
    if (const int result = send->ready(partition, partition); result != MPI_SUCCESS) return result;
  return PMPI_Pready(partition, request);
}

int handle_Pready_range(int partition_low, int partition_high, MPI_Request request) {
  PartitionedRequest* send = partitioned(request, false);
  if (send && partition_low <= partition_high && send->holds(partition_low) && send->holds(partition_high))
    if (const int result = send->ready(partition_low, partition_high); result != MPI_SUCCESS) return result;
  return PMPI_Pready_range(partition_low, partition_high, request);
}

int handle_Pready_list(int length, FERRY_MPI41_CONST int array_of_partitions[], MPI_Request request) {
  if (PartitionedRequest* send = partitioned(request, false); send && array_of_partitions)
    for (int i = 0; i < length; ++i)
      if (send->holds(array_of_partitions[i]))
        if (const int result = send->ready(array_of_partitions[i], array_of_partitions[i]); result != MPI_SUCCESS)
          return result;
  return PMPI_Pready_list(length, array_of_partitions, request);
}

int handle_Parrived(MPI_Request request, int partition, int* flag) {
  const int result = PMPI_Parrived(request, partition, flag);
  if (result != MPI_SUCCESS || !flag || !*flag) return result;
  PartitionedRequest* receive = partitioned(request, true);
  return receive && receive->holds(partition) ? receive->arrived(partition) : result;
}

}  // namespace ferry::shim

#endif  // FERRY_MPI_40
