// MPI-IO on device buffers, staged: a read goes into a pinned host copy of
// the device buffer, copied back to the device when the read completes (the
// call itself, the Wait or Test of a nonblocking read, the _end of a split
// collective), so the bytes a short read leaves alone keep their values
// without trusting the count in a status; a write copies the device buffer
// first. File
// views and the file's own datatypes are the real MPI's business: only the
// memory side, count elements of the memory datatype, is staged. Errors go
// through the file's error handler.
#include <memory>
#include <mutex>
#include <unordered_map>

#include "handlers.h"
#include "mpi_shim/requests.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {
namespace {

// A blocking or nonblocking read or write. pmpi(buffer, status) makes the
// real call on the buffer to use; a nonblocking one ignores status and
// returns its request in *request.
template <typename PmpiCall>
int transfer(FunctionId id, bool read, MPI_File fh, const void* buf, int count, MPI_Datatype type, MPI_Status* status,
             MPI_Request* request, PmpiCall pmpi) {
  count_bytes(id, count, type);
  void* user = const_cast<void*>(buf);
  if (route_call(id, {buf}, true).route == Route::kPmpi) return pmpi(user, status);
  Extent extent;
  if (fh == MPI_FILE_NULL || !extent_of(count, type, &extent)) return pmpi(user, status);
  Staging staging(id, fh);
  void* staged = read ? staging.inout(user, extent) : const_cast<void*>(staging.in(buf, extent));
  if (staging.failed()) return staging.raise();
  if (!request) return staging.finish(pmpi(staged, status));
  const int result = pmpi(staged, nullptr);
  if (result != MPI_SUCCESS || !staging.staged_any()) return result;
  // Finished by the Wait or Test that completes the request, whatever its
  // status says: Open MPI's I/O requests leave the status's cancelled flag
  // unset.
  auto held = std::make_shared<Staging>(std::move(staging));
  track_request(*request, [held] { return held->finish(MPI_SUCCESS); });
  return result;
}

// A split collective between its _begin and its _end: at most one per file.
struct SplitCall {
  explicit SplitCall(Staging s, void* staged) : staging(std::move(s)), staged(staged) {}
  Staging staging;
  void* staged;  // the buffer the real MPI was given
};
std::mutex split_mutex;
std::unordered_map<MPI_File, std::unique_ptr<SplitCall>>& split_calls() {
  static auto* table = new std::unordered_map<MPI_File, std::unique_ptr<SplitCall>>;
  return *table;
}

// A split collective's _begin: pmpi(buffer) makes the real call.
template <typename PmpiCall>
int begin_split(FunctionId id, bool read, MPI_File fh, const void* buf, int count, MPI_Datatype type, PmpiCall pmpi) {
  count_bytes(id, count, type);
  void* user = const_cast<void*>(buf);
  if (route_call(id, {buf}, true).route == Route::kPmpi) return pmpi(user);
  Extent extent;
  if (fh == MPI_FILE_NULL || !extent_of(count, type, &extent)) return pmpi(user);
  Staging staging(id, fh);
  void* staged = read ? staging.inout(user, extent) : const_cast<void*>(staging.in(buf, extent));
  if (staging.failed()) return staging.raise();
  const int result = pmpi(staged);
  if (result != MPI_SUCCESS || !staging.staged_any()) return result;
  std::lock_guard<std::mutex> lock(split_mutex);
  split_calls()[fh] = std::make_unique<SplitCall>(std::move(staging), staged);
  return result;
}

// Its _end: pmpi(buffer, status) makes the real call on the buffer _begin
// gave the real MPI; a read's data goes to the device.
template <typename PmpiCall>
int end_split(MPI_File fh, const void* buf, MPI_Status* status, PmpiCall pmpi) {
  std::unique_ptr<SplitCall> call;
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
