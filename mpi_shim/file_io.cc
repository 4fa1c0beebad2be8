// MPI-IO on device buffers, staged: a read goes into a pinned host copy of
// the device buffer, copied back to the device when the read completes (the
// call itself, the Wait or Test of a nonblocking read, the _end of a split
// collective), so the bytes a short read leaves alone keep their values
// without trusting the count in a status; a write copies the device buffer
// first. File views and the file's own datatypes are the real MPI's
// business: only the memory side, count elements of the memory datatype, is
// staged. Errors go through the file's error handler.
#include <memory>
#include <mutex>
#include <unordered_map>

#include "handlers.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {
namespace {

// The memory side of one read or write: the host copy the real MPI is given.
struct StagedMemory {
  explicit StagedMemory(Staging s) : staging(std::move(s)) {}
  Staging staging;
  void* staged = nullptr;  // the buffer the real MPI is given
};

// Stages count elements of type at buf, both ways for a read, in for a
// write (staging.failed() tells whether that worked). Null where the call
// takes buf as it is: host memory, or arguments the real MPI rejects itself.
std::unique_ptr<StagedMemory> stage_memory(FunctionId id, bool read, MPI_File fh, const void* buf, int count,
                                           MPI_Datatype type) {
  count_bytes(id, count, type);
  Extent extent;
  if (route_call(id, {buf}, true).route == Route::kPmpi || fh == MPI_FILE_NULL || !extent_of(count, type, &extent))
    return nullptr;
  auto memory = std::make_unique<StagedMemory>(Staging(id, Staging::OnFile{fh}));
  memory->staged =
      read ? memory->staging.inout(const_cast<void*>(buf), extent) : const_cast<void*>(memory->staging.in(buf, extent));
  return memory;
}

// A blocking or nonblocking read or write. pmpi(buffer, status) makes the
// real call on the buffer to use; a nonblocking one ignores status and
// returns its request in *request.
template <typename PmpiCall>
int transfer(FunctionId id, bool read, MPI_File fh, const void* buf, int count, MPI_Datatype type, MPI_Status* status,
             MPI_Request* request, PmpiCall pmpi) {
  std::unique_ptr<StagedMemory> memory = stage_memory(id, read, fh, buf, count, type);
  if (!memory) return pmpi(const_cast<void*>(buf), status);
  if (memory->staging.failed()) return memory->staging.raise();
  if (!request) return memory->staging.finish(pmpi(memory->staged, status));
  const int result = pmpi(memory->staged, nullptr);
  if (result != MPI_SUCCESS || !memory->staging.staged_any()) return result;
  // Finished by the Wait or Test that completes the request, whatever its
  // status says: Open MPI's I/O requests leave the status's cancelled flag
  // unset.
  std::shared_ptr<StagedMemory> held = std::move(memory);
  track_request(*request, [held] { return held->staging.finish(MPI_SUCCESS); });
  return result;
}

// The split collectives between their _begin and their _end: at most one
// per file.
std::mutex split_mutex;
std::unordered_map<MPI_File, std::unique_ptr<StagedMemory>>& split_calls() {
  static auto* table = new std::unordered_map<MPI_File, std::unique_ptr<StagedMemory>>;
  return *table;
}

// A split collective's _begin: pmpi(buffer) makes the real call.
template <typename PmpiCall>
int begin_split(FunctionId id, bool read, MPI_File fh, const void* buf, int count, MPI_Datatype type, PmpiCall pmpi) {
  std::unique_ptr<StagedMemory> memory = stage_memory(id, read, fh, buf, count, type);
  if (!memory) return pmpi(const_cast<void*>(buf));
  if (memory->staging.failed()) return memory->staging.raise();
  const int result = pmpi(memory->staged);
  if (result != MPI_SUCCESS || !memory->staging.staged_any()) return result;
  std::lock_guard<std::mutex> lock(split_mutex);
  split_calls()[fh] = std::move(memory);
  return result;
}

// Its _end: pmpi(buffer, status) makes the real call on the buffer _begin
// gave the real MPI; a read's data goes to the device.
template <typename PmpiCall>
int end_split(MPI_File fh, const void* buf, MPI_Status* status, PmpiCall pmpi) {
  std::unique_ptr<StagedMemory> call;
  {
    std::lock_guard<std::mutex> lock(split_mutex);
    auto it = split_calls().find(fh);
    if (it != split_calls().end()) {
      call = std::move(it->second);
      split_calls().erase(it);
    }
  }
  if (!call) return pmpi(const_cast<void*>(buf), status);
  return call->staging.finish(pmpi(call->staged, status));
}

constexpr bool kRead = true;
constexpr bool kWrite = false;

}  // namespace

int handle_File_read(MPI_File fh, void* buf, int count, MPI_Datatype datatype, MPI_Status* status) {
  return transfer(FunctionId::kFile_read, kRead, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_read(fh, b, count, datatype, s); });
}

int handle_File_read_all(MPI_File fh, void* buf, int count, MPI_Datatype datatype, MPI_Status* status) {
  return transfer(FunctionId::kFile_read_all, kRead, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_read_all(fh, b, count, datatype, s); });
}

int handle_File_read_at(MPI_File fh, MPI_Offset offset, void* buf, int count, MPI_Datatype datatype,
                        MPI_Status* status) {
  return transfer(FunctionId::kFile_read_at, kRead, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_read_at(fh, offset, b, count, datatype, s); });
}

int handle_File_read_at_all(MPI_File fh, MPI_Offset offset, void* buf, int count, MPI_Datatype datatype,
                            MPI_Status* status) {
  return transfer(FunctionId::kFile_read_at_all, kRead, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_read_at_all(fh, offset, b, count, datatype, s); });
}

int handle_File_read_shared(MPI_File fh, void* buf, int count, MPI_Datatype datatype, MPI_Status* status) {
  return transfer(FunctionId::kFile_read_shared, kRead, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_read_shared(fh, b, count, datatype, s); });
}

int handle_File_read_ordered(MPI_File fh, void* buf, int count, MPI_Datatype datatype, MPI_Status* status) {
  return transfer(FunctionId::kFile_read_ordered, kRead, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_read_ordered(fh, b, count, datatype, s); });
}

int handle_File_write(MPI_File fh, const void* buf, int count, MPI_Datatype datatype, MPI_Status* status) {
  return transfer(FunctionId::kFile_write, kWrite, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_write(fh, b, count, datatype, s); });
}

int handle_File_write_all(MPI_File fh, const void* buf, int count, MPI_Datatype datatype, MPI_Status* status) {
  return transfer(FunctionId::kFile_write_all, kWrite, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_write_all(fh, b, count, datatype, s); });
}

int handle_File_write_at(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype datatype,
                         MPI_Status* status) {
  return transfer(FunctionId::kFile_write_at, kWrite, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_write_at(fh, offset, b, count, datatype, s); });
}

int handle_File_write_at_all(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype datatype,
                             MPI_Status* status) {
  return transfer(FunctionId::kFile_write_at_all, kWrite, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_write_at_all(fh, offset, b, count, datatype, s); });
}

int handle_File_write_shared(MPI_File fh, const void* buf, int count, MPI_Datatype datatype, MPI_Status* status) {
  return transfer(FunctionId::kFile_write_shared, kWrite, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_write_shared(fh, b, count, datatype, s); });
}

int handle_File_write_ordered(MPI_File fh, const void* buf, int count, MPI_Datatype datatype, MPI_Status* status) {
  return transfer(FunctionId::kFile_write_ordered, kWrite, fh, buf, count, datatype, status, nullptr,
                  [&](void* b, MPI_Status* s) { return PMPI_File_write_ordered(fh, b, count, datatype, s); });
}

int handle_File_iread(MPI_File fh, void* buf, int count, MPI_Datatype datatype, MPI_Request* request) {
  return transfer(FunctionId::kFile_iread, kRead, fh, buf, count, datatype, nullptr, request,
                  [&](void* b, MPI_Status*) { return PMPI_File_iread(fh, b, count, datatype, request); });
}

int handle_File_iread_all(MPI_File fh, void* buf, int count, MPI_Datatype datatype, MPI_Request* request) {
  return transfer(FunctionId::kFile_iread_all, kRead, fh, buf, count, datatype, nullptr, request,
                  [&](void* b, MPI_Status*) { return PMPI_File_iread_all(fh, b, count, datatype, request); });
}

int handle_File_iread_at(MPI_File fh, MPI_Offset offset, void* buf, int count, MPI_Datatype datatype,
                         MPI_Request* request) {
  return transfer(FunctionId::kFile_iread_at, kRead, fh, buf, count, datatype, nullptr, request,
                  [&](void* b, MPI_Status*) { return PMPI_File_iread_at(fh, offset, b, count, datatype, request); });
}

int handle_File_iread_at_all(MPI_File fh, MPI_Offset offset, void* buf, int count, MPI_Datatype datatype,
                             MPI_Request* request) {
  return transfer(
      FunctionId::kFile_iread_at_all, kRead, fh, buf, count, datatype, nullptr, request,
      [&](void* b, MPI_Status*) { return PMPI_File_iread_at_all(fh, offset, b, count, datatype, request); });
}

int handle_File_iread_shared(MPI_File fh, void* buf, int count, MPI_Datatype datatype, MPI_Request* request) {
  return transfer(FunctionId::kFile_iread_shared, kRead, fh, buf, count, datatype, nullptr, request,
                  [&](void* b, MPI_Status*) { return PMPI_File_iread_shared(fh, b, count, datatype, request); });
}

int handle_File_iwrite(MPI_File fh, const void* buf, int count, MPI_Datatype datatype, MPI_Request* request) {
  return transfer(FunctionId::kFile_iwrite, kWrite, fh, buf, count, datatype, nullptr, request,
                  [&](void* b, MPI_Status*) { return PMPI_File_iwrite(fh, b, count, datatype, request); });
}

int handle_File_iwrite_all(MPI_File fh, const void* buf, int count, MPI_Datatype datatype, MPI_Request* request) {
  return transfer(FunctionId::kFile_iwrite_all, kWrite, fh, buf, count, datatype, nullptr, request,
                  [&](void* b, MPI_Status*) { return PMPI_File_iwrite_all(fh, b, count, datatype, request); });
}

int handle_File_iwrite_at(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype datatype,
                          MPI_Request* request) {
  return transfer(FunctionId::kFile_iwrite_at, kWrite, fh, buf, count, datatype, nullptr, request,
                  [&](void* b, MPI_Status*) { return PMPI_File_iwrite_at(fh, offset, b, count, datatype, request); });
}

int handle_File_iwrite_at_all(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype datatype,
                              MPI_Request* request) {
  return transfer(
      FunctionId::kFile_iwrite_at_all, kWrite, fh, buf, count, datatype, nullptr, request,
      [&](void* b, MPI_Status*) { return PMPI_File_iwrite_at_all(fh, offset, b, count, datatype, request); });
}

int handle_File_iwrite_shared(MPI_File fh, const void* buf, int count, MPI_Datatype datatype, MPI_Request* request) {
  return transfer(FunctionId::kFile_iwrite_shared, kWrite, fh, buf, count, datatype, nullptr, request,
                  [&](void* b, MPI_Status*) { return PMPI_File_iwrite_shared(fh, b, count, datatype, request); });
}

int handle_File_read_all_begin(MPI_File fh, void* buf, int count, MPI_Datatype datatype) {
  return begin_split(FunctionId::kFile_read_all_begin, kRead, fh, buf, count, datatype,
                     [&](void* b) { return PMPI_File_read_all_begin(fh, b, count, datatype); });
}

int handle_File_read_all_end(MPI_File fh, void* buf, MPI_Status* status) {
  return end_split(fh, buf, status, [&](void* b, MPI_Status* s) { return PMPI_File_read_all_end(fh, b, s); });
}

int handle_File_read_at_all_begin(MPI_File fh, MPI_Offset offset, void* buf, int count, MPI_Datatype datatype) {
  return begin_split(FunctionId::kFile_read_at_all_begin, kRead, fh, buf, count, datatype,
                     [&](void* b) { return PMPI_File_read_at_all_begin(fh, offset, b, count, datatype); });
}

int handle_File_read_at_all_end(MPI_File fh, void* buf, MPI_Status* status) {
  return end_split(fh, buf, status, [&](void* b, MPI_Status* s) { return PMPI_File_read_at_all_end(fh, b, s); });
}

int handle_File_read_ordered_begin(MPI_File fh, void* buf, int count, MPI_Datatype datatype) {
  return begin_split(FunctionId::kFile_read_ordered_begin, kRead, fh, buf, count, datatype,
                     [&](void* b) { return PMPI_File_read_ordered_begin(fh, b, count, datatype); });
}

int handle_File_read_ordered_end(MPI_File fh, void* buf, MPI_Status* status) {
  return end_split(fh, buf, status, [&](void* b, MPI_Status* s) { return PMPI_File_read_ordered_end(fh, b, s); });
}

int handle_File_write_all_begin(MPI_File fh, const void* buf, int count, MPI_Datatype datatype) {
  return begin_split(FunctionId::kFile_write_all_begin, kWrite, fh, buf, count, datatype,
                     [&](void* b) { return PMPI_File_write_all_begin(fh, b, count, datatype); });
}

int handle_File_write_all_end(MPI_File fh, const void* buf, MPI_Status* status) {
  return end_split(fh, buf, status, [&](void* b, MPI_Status* s) { return PMPI_File_write_all_end(fh, b, s); });
}

int handle_File_write_at_all_begin(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype datatype) {
  return begin_split(FunctionId::kFile_write_at_all_begin, kWrite, fh, buf, count, datatype,
                     [&](void* b) { return PMPI_File_write_at_all_begin(fh, offset, b, count, datatype); });
}

int handle_File_write_at_all_end(MPI_File fh, const void* buf, MPI_Status* status) {
  return end_split(fh, buf, status, [&](void* b, MPI_Status* s) { return PMPI_File_write_at_all_end(fh, b, s); });
}

int handle_File_write_ordered_begin(MPI_File fh, const void* buf, int count, MPI_Datatype datatype) {
  return begin_split(FunctionId::kFile_write_ordered_begin, kWrite, fh, buf, count, datatype,
                     [&](void* b) { return PMPI_File_write_ordered_begin(fh, b, count, datatype); });
}

int handle_File_write_ordered_end(MPI_File fh, const void* buf, MPI_Status* status) {
  return end_split(fh, buf, status, [&](void* b, MPI_Status* s) { return PMPI_File_write_ordered_end(fh, b, s); });
}

}  // namespace ferry::shim
