// Calls that move data inside this process: MPI_Reduce_local (on the GPU for
// predefined types and ops, otherwise staged), packing and unpacking
// (staged), and memory handed to or taken from the MPI library: MPI_Alloc_mem
// asked for device memory, and a device buffer given to MPI_Buffer_attach
// (MPI 4.1: MPI_Comm_attach_buffer, MPI_Session_attach_buffer).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "engine/collectives/collectives.h"
#include "engine/common/log.h"
#include "handlers.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

// Errors of calls without a communicator go where the real MPI sends them.
const MPI_Comm kNoComm = MPI_COMM_WORLD;

// Pack and unpack on the staged route. typed holds count elements of type;
// packed's bytes from position to end hold the packed form, of which at most
// packed_bytes are touched. packing: typed is the input, else the output.
// pmpi(typed, packed) makes the real call on the buffers to use.
template <typename PmpiCall>
int pack_staged(FunctionId id, MPI_Comm comm, bool packing, const void* typed, int count, MPI_Datatype type,
                const void* packed, MPI_Aint position, MPI_Aint end, MPI_Aint packed_bytes, PmpiCall pmpi) {
  count_bytes(id, count, type);
  auto as_is = [&] { return pmpi(const_cast<void*>(typed), const_cast<void*>(packed)); };
  if (route_call(id, {typed, packed}, true).route == Route::kPmpi) return as_is();
  Extent typed_extent;
  if (position < 0 || end < position || packed_bytes < 0 || !extent_of(count, type, &typed_extent)) return as_is();
  Extent packed_extent;
  packed_extent.lb = position;
  packed_extent.bytes = static_cast<std::size_t>(std::min(end - position, packed_bytes));
  // What the call does not write keeps its bytes.
  packed_extent.dense = !packing;
  Staging staging(id, comm);
  void* t = packing ? const_cast<void*>(staging.in(typed, typed_extent))
                    : staging.out(const_cast<void*>(typed), typed_extent);
  void* p = packing ? staging.out(const_cast<void*>(packed), packed_extent)
                    : const_cast<void*>(staging.in(packed, packed_extent));
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(t, p));
}

// Bytes count elements of type take packed; -1 when the real MPI refuses.
MPI_Aint packed_size(int count, MPI_Datatype type, MPI_Comm comm) {
  int bytes = 0;
  return count >= 0 && type != MPI_DATATYPE_NULL && PMPI_Pack_size(count, type, comm, &bytes) == MPI_SUCCESS ? bytes
                                                                                                             : -1;
}

MPI_Aint external_size(const char* datarep, int count, MPI_Datatype type) {
  MPI_Aint bytes = 0;
  return datarep && count >= 0 && type != MPI_DATATYPE_NULL &&
                 PMPI_Pack_external_size(datarep, count, type, &bytes) == MPI_SUCCESS
             ? bytes
             : -1;
}

// Device memory MPI_Alloc_mem handed out, by address, with its backend.
std::mutex allocations_mutex;
std::unordered_map<void*, gpu::Backend*>& device_allocations() {
  static auto* table = new std::unordered_map<void*, gpu::Backend*>;
  return *table;
}

// The host memory the real MPI packs buffered sends into while the
// application's attached buffer is device memory: one for the process, and
// (MPI 4.1) one a communicator or session, by its handle.
struct ShadowedBuffer {
  void* device = nullptr;
  void* host = nullptr;
};
enum class Owner { kProcess, kComm, kSession };
using OwnerKey = std::pair<Owner, std::uintptr_t>;
std::mutex shadow_mutex;
std::map<OwnerKey, ShadowedBuffer> shadowed_buffers;

template <typename Handle>
OwnerKey owner_key(Owner owner, Handle handle) {
  if constexpr (std::is_pointer_v<Handle>) {
    return {owner, reinterpret_cast<std::uintptr_t>(handle)};
  } else {
    return {owner, static_cast<std::uintptr_t>(handle)};
  }
}

// Attaches buffer through attach (the real MPI's call, on the memory given
// to it): device memory is shadowed by host memory of its size.
template <typename Attach>
int attach_shadowed(OwnerKey owner, MPI_Comm errors, void* buffer, int size, Attach attach) {
  if (size <= 0 || gpu::classify(buffer).kind != gpu::MemoryKind::kDevice) return attach(buffer);
  void* host = std::malloc(static_cast<std::size_t>(size));
  if (!host) return raise_error(errors, MPI_ERR_NO_MEM);
  const int result = attach(host);
  if (result != MPI_SUCCESS) {
    std::free(host);
    return result;
  }
  std::lock_guard<std::mutex> lock(shadow_mutex);
  shadowed_buffers[owner] = {buffer, host};
  return MPI_SUCCESS;
}

// After the real MPI's detach gave result: the application's device pointer
// where it gave the shadow.
int detach_shadowed(OwnerKey owner, void* buffer_addr, int result) {
  if (result != MPI_SUCCESS || !buffer_addr) return result;
  void** detached = static_cast<void**>(buffer_addr);
  std::lock_guard<std::mutex> lock(shadow_mutex);
  auto it = shadowed_buffers.find(owner);
  if (it != shadowed_buffers.end() && *detached == it->second.host) {
    *detached = it->second.device;
    std::free(it->second.host);
    shadowed_buffers.erase(it);
  }
  return result;
}

}  // namespace

int handle_Reduce_local(const void* inbuf, void* inoutbuf, int count, MPI_Datatype datatype, MPI_Op op) {
  const FunctionId id = FunctionId::kReduce_local;
  count_bytes(id, count, datatype);
  auto pmpi = [&](const void* in, void* inout) { return PMPI_Reduce_local(in, inout, count, datatype, op); };
  gpu::CallBuffers classified;
  RouteDecision route = decide_route(id, {inbuf, inoutbuf}, true, true);
  if (route.route == Route::kEngine) {
    DataType type = DataType::kFloat32;
    ReduceOp reduce_op = ReduceOp::kSum;
    Status status = Status::kUnsupported;
    if (count > 0 && engine_data_type(datatype, &type) && engine_reduce_op(op, &reduce_op))
      status = reduce_local(inbuf, inoutbuf, static_cast<std::size_t>(count), type, reduce_op);
    if (ok(status)) {
      record_route(id, route);
      return MPI_SUCCESS;
    }
    if (status != Status::kUnsupported) {
      FERRY_WARN(Coll, "MPI_Reduce_local: the reduction on the device failed: %s", status_name(status));
      return raise_error(kNoComm, MPI_ERR_OTHER);
    }
    route = {Route::kStaged, "not one device, or a type or op the engine does not reduce"};
  }
  record_route(id, route);
  Extent extent;
  if (route.route == Route::kPmpi || op == MPI_OP_NULL || !extent_of(count, datatype, &extent))
    return pmpi(inbuf, inoutbuf);
  Staging staging(id, kNoComm);
  const void* in = staging.in(inbuf, extent);
  void* inout = staging.inout(inoutbuf, extent);
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(in, inout));
}

int handle_Pack(const void* inbuf, int incount, MPI_Datatype datatype, void* outbuf, int outsize, int* position,
                MPI_Comm comm) {
  if (!position) return PMPI_Pack(inbuf, incount, datatype, outbuf, outsize, position, comm);
  return pack_staged(FunctionId::kPack, comm, true, inbuf, incount, datatype, outbuf, *position, outsize,
                     packed_size(incount, datatype, comm), [&](void* typed, void* packed) {
                       return PMPI_Pack(typed, incount, datatype, packed, outsize, position, comm);
                     });
}

int handle_Unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount, MPI_Datatype datatype,
                  MPI_Comm comm) {
  if (!position) return PMPI_Unpack(inbuf, insize, position, outbuf, outcount, datatype, comm);
  return pack_staged(FunctionId::kUnpack, comm, false, outbuf, outcount, datatype, inbuf, *position, insize,
                     packed_size(outcount, datatype, comm), [&](void* typed, void* packed) {
                       return PMPI_Unpack(packed, insize, position, typed, outcount, datatype, comm);
                     });
}

int handle_Pack_external(const char* datarep, const void* inbuf, int incount, MPI_Datatype datatype, void* outbuf,
                         MPI_Aint outsize, MPI_Aint* position) {
  if (!position) return PMPI_Pack_external(datarep, inbuf, incount, datatype, outbuf, outsize, position);
  return pack_staged(FunctionId::kPack_external, kNoComm, true, inbuf, incount, datatype, outbuf, *position, outsize,
                     external_size(datarep, incount, datatype), [&](void* typed, void* packed) {
                       return PMPI_Pack_external(datarep, typed, incount, datatype, packed, outsize, position);
                     });
}

int handle_Unpack_external(const char* datarep, const void* inbuf, MPI_Aint insize, MPI_Aint* position, void* outbuf,
                           int outcount, MPI_Datatype datatype) {
  if (!position) return PMPI_Unpack_external(datarep, inbuf, insize, position, outbuf, outcount, datatype);
  return pack_staged(FunctionId::kUnpack_external, kNoComm, false, outbuf, outcount, datatype, inbuf, *position, insize,
                     external_size(datarep, outcount, datatype), [&](void* typed, void* packed) {
                       return PMPI_Unpack_external(datarep, packed, insize, position, typed, outcount, datatype);
                     });
}

int handle_Alloc_mem(MPI_Aint size, MPI_Info info, void* baseptr) {
  if (size < 0 || !baseptr || !info_wants_device(info)) return PMPI_Alloc_mem(size, info, baseptr);
  gpu::Backend* backend = gpu::active_backend();
  void* memory = nullptr;
  // A zero-byte request still gets an address of its own to free.
  if (!backend || !ok(backend->device_alloc(size > 0 ? static_cast<std::size_t>(size) : 1, &memory))) {
    FERRY_WARN(Shim, "MPI_Alloc_mem: no device memory for %lld bytes", static_cast<long long>(size));
    return raise_error(kNoComm, MPI_ERR_NO_MEM);
  }
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    device_allocations()[memory] = backend;
  }
  FERRY_TRACE(Shim, "MPI_Alloc_mem: %lld bytes of device memory at %p", static_cast<long long>(size), memory);
  *static_cast<void**>(baseptr) = memory;
  return MPI_SUCCESS;
}

int handle_Free_mem(void* base) {
  gpu::Backend* backend = nullptr;
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    auto it = device_allocations().find(base);
    if (it == device_allocations().end()) return PMPI_Free_mem(base);
    backend = it->second;
    device_allocations().erase(it);
  }
  return ok(backend->device_free(base)) ? MPI_SUCCESS : raise_error(kNoComm, MPI_ERR_OTHER);
}

int handle_Buffer_attach(void* buffer, int size) {
  return attach_shadowed(owner_key(Owner::kProcess, 0), kNoComm, buffer, size,
                         [size](void* given) { return PMPI_Buffer_attach(given, size); });
}

int handle_Buffer_detach(void* buffer_addr, int* size) {
  return detach_shadowed(owner_key(Owner::kProcess, 0), buffer_addr, PMPI_Buffer_detach(buffer_addr, size));
}

#if defined(FERRY_MPI_41)
int handle_Comm_attach_buffer(MPI_Comm comm, void* buffer, int size) {
  return attach_shadowed(owner_key(Owner::kComm, comm), comm, buffer, size,
                         [comm, size](void* given) { return PMPI_Comm_attach_buffer(comm, given, size); });
}

int handle_Comm_detach_buffer(MPI_Comm comm, void* buffer_addr, int* size) {
  return detach_shadowed(owner_key(Owner::kComm, comm), buffer_addr, PMPI_Comm_detach_buffer(comm, buffer_addr, size));
}

int handle_Session_attach_buffer(MPI_Session session, void* buffer, int size) {
  return attach_shadowed(owner_key(Owner::kSession, session), kNoComm, buffer, size,
                         [session, size](void* given) { return PMPI_Session_attach_buffer(session, given, size); });
}

int handle_Session_detach_buffer(MPI_Session session, void* buffer_addr, int* size) {
  return detach_shadowed(owner_key(Owner::kSession, session), buffer_addr,
                         PMPI_Session_detach_buffer(session, buffer_addr, size));
}
#endif

}  // namespace ferry::shim
