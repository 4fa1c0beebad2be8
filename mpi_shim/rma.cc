// One-sided communication on device memory. A window is Ferry's when any
// rank's window memory is device memory (MPI_Win_create on a device buffer,
// or MPI_Win_allocate(_shared) asked for device memory through the MPI 4.1
// info key mpi_memory_alloc_kinds = cuda:device, or ferry_device = true).
// The application's MPI_Win is then a real MPI window of size zero that
// carries the handle, group, name, info and error handler; the data and the
// synchronization go through the engine window (engine/pgas/window.h).
// MPI_Win_create_dynamic makes a device window when info asks for device
// memory; its ranks then attach device memory only (host memory is
// MPI_ERR_ARG). Any committed datatype works on device windows: types are
// flattened into byte runs (cached on the type) and moved run by run.
// Every other window is the real MPI's, and its calls pass through, except
// that device origin and result buffers are staged through host memory.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "engine/bootstrap/mpi_bootstrap.h"
#include "engine/common/params.h"
#include "engine/pgas/window.h"
#include "handlers.h"
#include "mpi_shim/requests.h"
#include "mpi_shim/rma.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

struct DeviceWindow {
  // The window's own engine communicator, over a private duplicate of the
  // application's: MPI lets the application free its communicator before
  // the window. Declared first, so the window goes first.
  std::unique_ptr<Communicator> engine;
  // The memory of MPI_Win_allocate(_shared): at the same offset on every
  // rank, every rank's copy mapped here (no IPC handles).
  std::unique_ptr<SymmetricHeap> heap;
  std::unique_ptr<Window> window;
  MPI_Group group = MPI_GROUP_NULL;  // the window's ranks, for PSCW groups
  void* allocated = nullptr;         // Ferry's memory behind Win_allocate(_shared)
  // What MPI_Win_get_attr reports.
  void* base = nullptr;
  MPI_Aint size = 0;
  int disp_unit = 1;
  int flavor = MPI_WIN_FLAVOR_CREATE;
  int model = MPI_WIN_UNIFIED;
  std::mutex mutex;  // one call at a time per window (MPI_THREAD_MULTIPLE)
};

std::shared_mutex windows_mutex;
std::unordered_map<MPI_Win, DeviceWindow*>& device_windows() {
  static auto* table = new std::unordered_map<MPI_Win, DeviceWindow*>;
  return *table;
}
// Lets calls on the real MPI's windows skip the table while Ferry has none.
std::atomic<int> device_window_count{0};

DeviceWindow* find_window(MPI_Win win) {
  if (device_window_count.load(std::memory_order_acquire) == 0 || win == MPI_WIN_NULL) return nullptr;
  std::shared_lock<std::shared_mutex> lock(windows_mutex);
  auto it = device_windows().find(win);
  return it == device_windows().end() ? nullptr : it->second;
}

bool is_device_memory(const void* p) { return p && gpu::classify(p).kind == gpu::MemoryKind::kDevice; }

// Every rank learns whether any rank's memory is on the device, and whether
// any rank offers host memory next to it. False when comm cannot be used:
// the real MPI's window call then reports that.
bool agree_on_memory(MPI_Comm comm, bool device_here, bool host_here, bool* any_device, bool* any_host) {
  int inter = 0;
  if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return false;
  int mine[2] = {device_here, host_here}, all[2] = {0, 0};
  if (PMPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS) return false;
  *any_device = all[0];
  *any_host = all[1];
  return true;
}

// The window's own engine communicator (collective); false, with the error
// raised, when its ranks cannot map each other's device memory.
bool window_engine(FunctionId id, MPI_Comm comm, std::unique_ptr<Communicator>* engine, int* rc) {
  if (ok(Communicator::create(make_mpi_bootstrap(comm), engine)) && (*engine)->all_peers_mapped()) return true;
  FERRY_WARN(Pgas, "%s: device window memory needs every rank on one machine with peer mapping (p2p)",
             function_name(id));
  *rc = raise_error(comm, MPI_ERR_WIN);
  return false;
}

// Creates Ferry's window over this rank's device memory (collective), on
// engine (made here when null) and, for Win_allocate(_shared), heap.
int create_device_window(FunctionId id, void* base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                         int flavor, void* allocated, MPI_Win* win, std::unique_ptr<Communicator> engine = nullptr,
                         std::unique_ptr<SymmetricHeap> heap = nullptr) {
  int failed = MPI_SUCCESS;
  if (!engine && !window_engine(id, comm, &engine, &failed)) return failed;
  // The real MPI's window carries the handle. Allocated rather than created:
  // osc/sm serves an allocation on one machine wherever the MPI has no
  // one-sided network component for created windows.
  void* unused = nullptr;
  const int rc = PMPI_Win_allocate(0, 1, info, comm, &unused, win);
  if (rc != MPI_SUCCESS) return rc;
  std::unique_ptr<Window> window;
  const Status status = Window::create(*engine, base, static_cast<std::size_t>(size), disp_unit, &window,
                                       flavor == MPI_WIN_FLAVOR_DYNAMIC, heap.get());
  if (!ok(status)) {
    FERRY_WARN(Pgas, "%s: the device window could not be set up: %s", function_name(id), status_name(status));
    PMPI_Win_free(win);
    return raise_error(comm, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_WIN);
  }
  auto record = std::make_unique<DeviceWindow>();
  record->engine = std::move(engine);
  record->heap = std::move(heap);
  record->window = std::move(window);
  PMPI_Comm_group(comm, &record->group);
  record->allocated = allocated;
  record->base = base;
  record->size = size;
  record->disp_unit = disp_unit;
  record->flavor = flavor;
  // Every call on the window must now reach its handler, in this process too.
  gpu::g_device_runtime_seen.store(true, std::memory_order_relaxed);
  std::unique_lock<std::shared_mutex> lock(windows_mutex);
  device_windows()[*win] = record.release();
  device_window_count.fetch_add(1, std::memory_order_release);
  return MPI_SUCCESS;
}

// Win_allocate and Win_allocate_shared.
int allocate_window(FunctionId id, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr,
                    MPI_Win* win, int flavor) {
  auto pmpi = [&] {
    return flavor == MPI_WIN_FLAVOR_SHARED ? PMPI_Win_allocate_shared(size, disp_unit, info, comm, baseptr, win)
                                           : PMPI_Win_allocate(size, disp_unit, info, comm, baseptr, win);
  };
  bool any_device = false, any_host = false;
  if (params().route == "pmpi" || size < 0 || disp_unit <= 0 || !baseptr || !win ||
      !agree_on_memory(comm, info_wants_device(info), false, &any_device, &any_host) || !any_device) {
    record_route(id, {Route::kPmpi, "no rank asked for device memory"});
    return pmpi();
  }
  record_route(id, {Route::kEngine, "device memory asked for"});
  gpu::Backend* backend = gpu::active_backend();
  std::unique_ptr<Communicator> engine;
  int rc = MPI_SUCCESS;
  if (!backend || !window_engine(id, comm, &engine, &rc)) return backend ? rc : raise_error(comm, MPI_ERR_WIN);

  // One symmetric object as large as the largest rank's window; every step
  // is collective and fails on every rank or on none.
  MPI_Aint largest = 0;
  PMPI_Allreduce(&size, &largest, 1, MPI_AINT, MPI_MAX, comm);
  std::unique_ptr<SymmetricHeap> heap;
  void* memory = nullptr;
  if (largest > 0) {
    const Status status = SymmetricHeap::create(engine->bootstrap(), backend, static_cast<std::size_t>(largest), &heap);
    if (ok(status) && ok(heap->allocate(static_cast<std::size_t>(largest), &memory))) {
      rc = create_device_window(id, memory, size, disp_unit, info, comm, flavor, nullptr, win, std::move(engine),
                                std::move(heap));
      if (rc == MPI_SUCCESS) *static_cast<void**>(baseptr) = memory;
      return rc;
    }
    FERRY_INFO(Pgas, "%s: no symmetric heap (%s); window memory mapped through IPC handles", function_name(id),
               status_name(status));
    heap.reset();
    memory = nullptr;
  }

  // Without a symmetric heap (the backend has no virtual memory management):
  // plain device memory, mapped by the peers through IPC handles. Every rank
  // allocates (or fails) before the collective set-up, so that a rank out of
  // memory cannot leave the others waiting.
  const bool allocated = size == 0 || ok(backend->device_alloc(static_cast<std::size_t>(size), &memory));
  int everyone = 0, mine = allocated;
  PMPI_Allreduce(&mine, &everyone, 1, MPI_INT, MPI_MIN, comm);
  if (!everyone) {
    if (memory) backend->device_free(memory);
    return raise_error(comm, MPI_ERR_NO_MEM);
  }
  rc = create_device_window(id, memory, size, disp_unit, info, comm, flavor, memory, win, std::move(engine));
  if (rc != MPI_SUCCESS) {
    if (memory) backend->device_free(memory);
    return rc;
  }
  *static_cast<void**>(baseptr) = memory;
  return MPI_SUCCESS;
}

// ---- Datatypes as byte runs ------------------------------------------------

// One element of a datatype as runs of bytes in type-map order, the order in
// which MPI pairs origin data with target data; adjacent runs are merged.
// Offsets are from the buffer pointer and may be negative.
struct TypeMap {
  struct Block {
    MPI_Aint offset;
    std::size_t bytes;
  };
  std::vector<Block> blocks;
  std::size_t size = 0;  // data bytes per element
  MPI_Aint extent = 0;   // from one element to the next
};

// The type map of one element, read off MPI's own packing: an image of the
// element's bytes in which every byte holds one digit of its own offset is
// packed once per digit, and the packed stream spells out where each data
// byte came from. Exact for every datatype MPI can build, holes and negative
// bounds included.
bool flatten(MPI_Datatype type, TypeMap* map) {
  int size = 0, packed_bytes = 0;
  MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS || PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS ||
      PMPI_Type_get_true_extent(type, &true_lb, &true_extent) != MPI_SUCCESS ||
      PMPI_Pack_size(1, type, MPI_COMM_SELF, &packed_bytes) != MPI_SUCCESS || packed_bytes < size)
    return false;
  map->size = static_cast<std::size_t>(size);
  map->extent = extent;
  if (size == 0) return true;
  std::vector<unsigned char> image(static_cast<std::size_t>(true_extent)), packed(packed_bytes);
  std::vector<std::uint64_t> source(map->size, 0);
  const auto last = static_cast<std::uint64_t>(true_extent - 1);
  // MPI reads the element from image - true_lb: its first byte is image[0].
  void* element = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(image.data()) - true_lb);
  for (int digit = 0; digit == 0 || (digit < 8 && (last >> (8 * digit)) != 0); ++digit) {
    for (std::size_t o = 0; o < image.size(); ++o) image[o] = static_cast<unsigned char>(o >> (8 * digit));
    int position = 0;
    if (PMPI_Pack(element, 1, type, packed.data(), packed_bytes, &position, MPI_COMM_SELF) != MPI_SUCCESS ||
        position != size)
      return false;
    for (std::size_t i = 0; i < map->size; ++i) source[i] |= std::uint64_t{packed[i]} << (8 * digit);
  }
  for (std::uint64_t from : source) {
    const MPI_Aint offset = true_lb + static_cast<MPI_Aint>(from);
    if (!map->blocks.empty() && map->blocks.back().offset + static_cast<MPI_Aint>(map->blocks.back().bytes) == offset)
      ++map->blocks.back().bytes;
    else
      map->blocks.push_back({offset, 1});
  }
  return true;
}

int delete_type_map(MPI_Datatype, int, void* value, void*) {
  delete static_cast<TypeMap*>(value);
  return MPI_SUCCESS;
}

// Flattened maps live as an attribute of their datatype: MPI deletes it
// when the type is freed, so a handle reused for a new type never finds the
// old map, and a duplicate (null copy function) flattens anew.
int type_map_keyval() {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    PMPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, delete_type_map, &k, nullptr);
    return k;
  }();
  return keyval;
}
std::mutex type_maps_mutex;  // one flattening per type, never a replaced attribute in use

// A datatype's map: dense types (all predefined ones among them) are one
// block, made on the spot; others are flattened once and cached.
struct TypeLayout {
  TypeMap dense;
  const TypeMap* map = nullptr;
};

int layout_of(MPI_Datatype type, TypeLayout* out) {
  if (type == MPI_DATATYPE_NULL) return MPI_ERR_TYPE;
  int size = 0;
  if (dense_data_type(type, &size)) {
    out->dense.blocks.assign(1, {0, static_cast<std::size_t>(size)});
    out->dense.size = static_cast<std::size_t>(size);
    out->dense.extent = size;
    out->map = &out->dense;
    return MPI_SUCCESS;
  }
  std::lock_guard<std::mutex> lock(type_maps_mutex);
  void* cached = nullptr;
  int found = 0;
  if (PMPI_Type_get_attr(type, type_map_keyval(), &cached, &found) != MPI_SUCCESS) return MPI_ERR_TYPE;
  if (!found) {
    auto map = std::make_unique<TypeMap>();
    // Fails on a type that is not committed, as the real MPI's RMA calls do.
    if (!flatten(type, map.get()) || PMPI_Type_set_attr(type, type_map_keyval(), map.get()) != MPI_SUCCESS)
      return MPI_ERR_TYPE;
    cached = map.release();
  }
  out->map = static_cast<const TypeMap*>(cached);
  return MPI_SUCCESS;
}

// count elements of a datatype at one buffer, as byte runs in type-map order.
struct Operand {
  TypeLayout layout;
  std::vector<TypeMap::Block> runs;
  std::size_t bytes = 0;
  MPI_Aint lo = 0, hi = 0;  // the bytes touched, [lo, hi) from the buffer pointer
};

int describe(int count, MPI_Datatype type, Operand* out) {
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = layout_of(type, &out->layout); rc != MPI_SUCCESS) return rc;
  const TypeMap& map = *out->layout.map;
  out->bytes = static_cast<std::size_t>(count) * map.size;
  if (out->bytes == 0) return MPI_SUCCESS;
  // A dense type is one run however many elements.
  const bool dense = map.blocks.size() == 1 && map.blocks[0].offset == 0 &&
                     static_cast<MPI_Aint>(map.blocks[0].bytes) == map.extent;
  if (dense) {
    out->runs.push_back({0, out->bytes});
  } else {
    out->runs.reserve(map.blocks.size() * static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i)
      for (const TypeMap::Block& b : map.blocks) {
        const MPI_Aint offset = static_cast<MPI_Aint>(i) * map.extent + b.offset;
        TypeMap::Block* back = out->runs.empty() ? nullptr : &out->runs.back();
        if (back && back->offset + static_cast<MPI_Aint>(back->bytes) == offset)
          back->bytes += b.bytes;
        else
          out->runs.push_back({offset, b.bytes});
      }
  }
  out->lo = out->runs[0].offset;
  out->hi = out->lo;
  for (const TypeMap::Block& r : out->runs) {
    out->lo = std::min(out->lo, r.offset);
    out->hi = std::max(out->hi, r.offset + static_cast<MPI_Aint>(r.bytes));
  }
  return MPI_SUCCESS;
}

// Splits the target's runs, and the origin's and result's when present, at
// every boundary of any of them (MPI pairs them by running byte position),
// so that each segment is contiguous at all three. Target offsets are from
// the target's lowest byte.
std::vector<Window::Segment> pair_runs(const Operand& target, const Operand* origin, const Operand* result) {
  struct Cursor {
    const std::vector<TypeMap::Block>* runs = nullptr;
    std::size_t index = 0, used = 0;
    std::size_t left() const { return runs && index < runs->size() ? (*runs)[index].bytes - used : SIZE_MAX; }
    MPI_Aint at() const { return runs && index < runs->size() ? (*runs)[index].offset + static_cast<MPI_Aint>(used) : 0; }
    void advance(std::size_t n) {
      if (!runs) return;
      used += n;
      if (index < runs->size() && used == (*runs)[index].bytes) {
        ++index;
        used = 0;
      }
    }
  };
  Cursor t{&target.runs}, o{origin ? &origin->runs : nullptr}, r{result ? &result->runs : nullptr};
  std::vector<Window::Segment> segments;
  segments.reserve(target.runs.size());
  while (t.index < target.runs.size()) {
    const std::size_t n = std::min({t.left(), o.left(), r.left()});
    if (n == 0 || n == SIZE_MAX) break;  // the sides' sizes were checked equal
    segments.push_back({o.at(), r.at(), static_cast<std::size_t>(t.at() - target.lo), n});
    t.advance(n);
    o.advance(n);
    r.advance(n);
  }
  return segments;
}

// The one predefined type a datatype is built from (MPI's basic type, which
// accumulates reduce), or MPI_DATATYPE_NULL when it mixes several.
MPI_Datatype basic_type(MPI_Datatype type) {
  int integers = 0, addresses = 0, types = 0, combiner = 0;
  if (type == MPI_DATATYPE_NULL ||
      PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner) != MPI_SUCCESS)
    return MPI_DATATYPE_NULL;
  if (combiner == MPI_COMBINER_NAMED) return type;
  std::vector<int> ints(integers);
  std::vector<MPI_Aint> addrs(addresses);
  std::vector<MPI_Datatype> inner(types);
  if (PMPI_Type_get_contents(type, integers, addresses, types, ints.data(), addrs.data(), inner.data()) !=
      MPI_SUCCESS)
    return MPI_DATATYPE_NULL;
  MPI_Datatype basic = MPI_DATATYPE_NULL;
  bool mixed = types == 0;
  for (MPI_Datatype t : inner) {
    const MPI_Datatype b = basic_type(t);
    mixed = mixed || b == MPI_DATATYPE_NULL || (basic != MPI_DATATYPE_NULL && b != basic);
    basic = b;
    // Derived types handed out by get_contents are the caller's to free.
    int inner_combiner = MPI_COMBINER_NAMED;
    PMPI_Type_get_envelope(t, &integers, &addresses, &types, &inner_combiner);
    if (inner_combiner != MPI_COMBINER_NAMED) PMPI_Type_free(&t);
  }
  return mixed ? MPI_DATATYPE_NULL : basic;
}

// Whether two basic types are the same one (MPI_INT and MPI_INT32_T are
// where they are the same engine type).
bool same_basic_type(MPI_Datatype a, MPI_Datatype b) {
  DataType ea, eb;
  return a == b || (engine_data_type(a, &ea) && engine_data_type(b, &eb) && ea == eb);
}

// ---- Checks shared by the data-movement calls ---------------------------

// One operation's target: its runs and where its bytes lie in this process.
struct Target : Operand {
  char* at = nullptr;
};

// MPI's checks for one operation's target, in the order Open MPI makes them.
// In a dynamic window disp is an address at the target (MPI_BOTTOM-relative).
int check_target(Window& w, int target, MPI_Aint disp, int count, MPI_Datatype type, Target* out) {
  if (target < 0 || target >= w.size()) return MPI_ERR_RANK;
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = describe(count, type, out); rc != MPI_SUCCESS) return rc;
  if (disp < 0 && !w.dynamic()) return MPI_ERR_DISP;
  if (!w.may_access(target)) return MPI_ERR_RMA_SYNC;
  const MPI_Aint first = disp * (w.dynamic() ? 1 : w.disp_unit(target)) + out->lo;
  const Status located = w.locate(target, first, out->bytes ? static_cast<std::size_t>(out->hi - out->lo) : 0,
                                  &out->at);
  if (located == Status::kInvalidArgument) return MPI_ERR_RMA_RANGE;
  return ok(located) ? MPI_SUCCESS : MPI_ERR_OTHER;
}

// The origin (or result) buffer must carry as many bytes as the target.
int check_origin(const void* buffer, int count, MPI_Datatype type, std::size_t target_bytes, Operand* out) {
  if (int rc = describe(count, type, out); rc != MPI_SUCCESS) return rc;
  if (out->bytes != target_bytes) return MPI_ERR_ARG;
  if (!buffer && target_bytes > 0) return MPI_ERR_BUFFER;
  return MPI_SUCCESS;
}

int engine_result(MPI_Win win, FunctionId id, Status status) {
  if (ok(status)) return MPI_SUCCESS;
  FERRY_WARN(Pgas, "%s on a device window failed: %s", function_name(id), status_name(status));
  return raise_win_error(win, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_OTHER);
}

int fail(MPI_Win win, int error_class) { return error_class == MPI_SUCCESS ? MPI_SUCCESS : raise_win_error(win, error_class); }

// MPI's accumulate op for an element type: predefined reductions, REPLACE
// and NO_OP; anything else is MPI_ERR_OP.
int accumulate_op(MPI_Op op, DataType element, AccumulateOp* out) {
  if (op == MPI_REPLACE) {
    *out = {AccumulateOp::kReplace, ReduceOp::kSum};
    return MPI_SUCCESS;
  }
  if (op == MPI_NO_OP) {
    *out = {AccumulateOp::kNoOp, ReduceOp::kSum};
    return MPI_SUCCESS;
  }
  ReduceOp reduce;
  if (!engine_reduce_op(op, &reduce) || !reduction_defined(element, reduce)) return MPI_ERR_OP;
  *out = {AccumulateOp::kReduce, reduce};
  return MPI_SUCCESS;
}

// A request that is already complete: the R-calls finish before returning.
int completed_request(MPI_Request* request) {
  auto query = [](void*, MPI_Status* status) {
    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
  };
  auto release = [](void*) { return MPI_SUCCESS; };
  auto cancel = [](void*, int) { return MPI_SUCCESS; };
  int rc = PMPI_Grequest_start(query, release, cancel, nullptr, request);
  return rc == MPI_SUCCESS ? PMPI_Grequest_complete(*request) : rc;
}

// Put (get_data false) and Get, segment by segment on the window's stream.
int move(DeviceWindow& dw, MPI_Win win, FunctionId id, void* origin, int origin_count, MPI_Datatype origin_type,
         int target, MPI_Aint disp, int target_count, MPI_Datatype target_type, bool passive_only, bool get_data) {
  Window& w = *dw.window;
  if (target == MPI_PROC_NULL) return MPI_SUCCESS;
  Target t;
  if (int rc = check_target(w, target, disp, target_count, target_type, &t); rc != MPI_SUCCESS) return fail(win, rc);
  if (passive_only && !w.passive_access(target)) return fail(win, MPI_ERR_RMA_SYNC);
  Operand o;
  if (int rc = check_origin(origin, origin_count, origin_type, t.bytes, &o); rc != MPI_SUCCESS) return fail(win, rc);
  const std::vector<Window::Segment> segments = pair_runs(t, &o, nullptr);
  return engine_result(win, id, get_data ? w.get(origin, t.at, segments.data(), segments.size())
                                         : w.put(origin, t.at, segments.data(), segments.size()));
}

// Accumulate, Get_accumulate, Fetch_and_op and the R-forms. result is null
// for Accumulate.
int get_accumulate(DeviceWindow& dw, MPI_Win win, FunctionId id, const void* origin, int origin_count,
                   MPI_Datatype origin_type, void* result, int result_count, MPI_Datatype result_type, int target,
                   MPI_Aint disp, int target_count, MPI_Datatype target_type, MPI_Op op, bool passive_only) {
  Window& w = *dw.window;
  if (target == MPI_PROC_NULL) return MPI_SUCCESS;
  Target t;
  if (int rc = check_target(w, target, disp, target_count, target_type, &t); rc != MPI_SUCCESS) return fail(win, rc);
  if (passive_only && !w.passive_access(target)) return fail(win, MPI_ERR_RMA_SYNC);
  // Elements are the target type's basic type, which the origin's and the
  // result's must be too.
  const MPI_Datatype basic = basic_type(target_type);
  DataType element = DataType::kUint8;
  int element_size = 0;
  if (basic == MPI_DATATYPE_NULL || PMPI_Type_size(basic, &element_size) != MPI_SUCCESS || element_size <= 0)
    return fail(win, MPI_ERR_TYPE);
  const bool reducible = engine_data_type(basic, &element);
  // REPLACE and NO_OP move bytes: any basic type will do.
  if (!reducible && op != MPI_REPLACE && op != MPI_NO_OP) return fail(win, MPI_ERR_TYPE);
  AccumulateOp how;
  if (int rc = accumulate_op(op, element, &how); rc != MPI_SUCCESS) return fail(win, rc);
  Operand o, r;
  const bool has_origin = how.kind != AccumulateOp::kNoOp;
  if (has_origin) {
    if (int rc = check_origin(origin, origin_count, origin_type, t.bytes, &o); rc != MPI_SUCCESS) return fail(win, rc);
    if (!same_basic_type(basic_type(origin_type), basic)) return fail(win, MPI_ERR_TYPE);
  }
  if (result) {
    if (int rc = check_origin(result, result_count, result_type, t.bytes, &r); rc != MPI_SUCCESS) return fail(win, rc);
    if (!same_basic_type(basic_type(result_type), basic)) return fail(win, MPI_ERR_TYPE);
  }
  const std::vector<Window::Segment> segments = pair_runs(t, has_origin ? &o : nullptr, result ? &r : nullptr);
  // Bytes are bytes for REPLACE and NO_OP: no element type needed.
  return engine_result(win, id, w.accumulate(origin, result, target, t.at, segments.data(), segments.size(),
                                             how.kind == AccumulateOp::kReduce ? element_size : 1,
                                             how.kind == AccumulateOp::kReduce ? element : DataType::kUint8, how));
}

// Translates a group's ranks into the window's.
int window_ranks(const DeviceWindow& dw, MPI_Group group, std::vector<int>* ranks) {
  int n = 0;
  if (group == MPI_GROUP_NULL || PMPI_Group_size(group, &n) != MPI_SUCCESS) return MPI_ERR_GROUP;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i;
  ranks->assign(n, MPI_UNDEFINED);
  if (n && PMPI_Group_translate_ranks(group, n, in.data(), dw.group, ranks->data()) != MPI_SUCCESS)
    return MPI_ERR_GROUP;
  for (int r : *ranks)
    if (r == MPI_UNDEFINED) return MPI_ERR_GROUP;
  return MPI_SUCCESS;
}

// Runs body(window record) under the window's lock when win is Ferry's,
// else other(), which routes the call itself.
template <typename Body, typename Other>
int on_data_window(FunctionId id, MPI_Win win, Body body, Other other) {
  DeviceWindow* dw = find_window(win);
  if (!dw) return other();
  record_route(id, {Route::kEngine, "device window"});
  std::lock_guard<std::mutex> lock(dw->mutex);
  return body(*dw);
}

// The same with the real MPI's call for the real MPI's windows.
template <typename Body, typename Pmpi>
int on_window(FunctionId id, MPI_Win win, Body body, Pmpi pmpi) {
  return on_data_window(id, win, body, [&] {
    record_route(id, {Route::kPmpi, "not a device window"});
    return pmpi();
  });
}

// ---- The real MPI's windows with device origin or result buffers --------
//
// A host window is the real MPI's, which cannot read or write device
// memory. A device origin (or compare) buffer is copied to pooled host
// memory when the call is made; a device result buffer gets a host buffer
// whose bytes are copied to it once the operation is complete: at the
// synchronization that completes it (flush, flush_local, unlock, fence,
// complete and their "all" forms) or, for Rget and Rget_accumulate, at the
// Wait or Test that completes the request, whichever comes first. The host
// copies live until that synchronization, since the real MPI may read an
// origin buffer until then.

constexpr int kEveryTarget = -1;

struct HostStaged {
  HostStaged(FunctionId id, MPI_Win win, int target) : staging(id, win), target(target) {}
  // Once: a later copy would overwrite what the program wrote since.
  int deliver() {
    std::lock_guard<std::mutex> lock(mutex);
    if (delivered) return MPI_SUCCESS;
    delivered = true;
    return staging.finish(MPI_SUCCESS);
  }
  Staging staging;
  const int target;
  std::mutex mutex;
  bool delivered = false;
};

std::mutex host_staged_mutex;
std::unordered_map<MPI_Win, std::vector<std::shared_ptr<HostStaged>>>& host_staged() {
  static auto* table = new std::unordered_map<MPI_Win, std::vector<std::shared_ptr<HostStaged>>>;
  return *table;
}
// Lets synchronizations skip the table while nothing is staged.
std::atomic<int> host_staged_count{0};

// A buffer of an operation on a host window.
struct HostOperand {
  const void* buffer;
  int count;
  MPI_Datatype type;
};

// pmpi(origin, compare, result) makes the real call on the buffers to use.
// With a request (the R-forms), a result buffer is also delivered when the
// request completes.
template <typename Pmpi>
int on_host_window(FunctionId id, MPI_Win win, int target, HostOperand origin, HostOperand compare,
                   HostOperand result, MPI_Request* request, Pmpi pmpi) {
  auto as_is = [&] {
    return pmpi(origin.buffer, compare.buffer, const_cast<void*>(result.buffer));
  };
  const HostOperand* operands[3] = {&origin, &compare, &result};
  // An operand is absent with a null buffer and no type; MPI_BOTTOM with a
  // type names memory by the type's addresses.
  auto present = [](const HostOperand* o) { return o->buffer || o->type != MPI_DATATYPE_NULL; };
  const bool bottom = std::any_of(operands, operands + 3,
                                  [&](const HostOperand* o) { return present(o) && o->buffer == MPI_BOTTOM; });
  if (route_call(id, {origin.buffer, compare.buffer, result.buffer}, bottom).route != Route::kStaged ||
      target == MPI_PROC_NULL)
    return as_is();
  Extent extents[3];
  for (int i = 0; i < 3; ++i)
    if (present(operands[i]) && !extent_of(operands[i]->count, operands[i]->type, &extents[i]))
      return as_is();  // invalid arguments: the real MPI reports them before touching a buffer
  auto staged = std::make_shared<HostStaged>(id, win, target);
  const void* o = staged->staging.in(origin.buffer, extents[0]);
  const void* c = staged->staging.in(compare.buffer, extents[1]);
  void* r = staged->staging.out(const_cast<void*>(result.buffer), extents[2]);
  if (staged->staging.failed()) return staged->staging.raise();
  const int rc = pmpi(o, c, r);
  if (rc != MPI_SUCCESS) return rc;
  if (request && result.buffer && staged->staging.staged_any())
    track_request(*request, [staged] { return staged->deliver(); });
  std::lock_guard<std::mutex> lock(host_staged_mutex);
  host_staged()[win].push_back(std::move(staged));
  host_staged_count.fetch_add(1, std::memory_order_release);
  return rc;
}

// After a synchronization on a host window returned mpi_result: when it
// succeeded, the operations to target (kEveryTarget: all) are complete, so
// their results go to the device and their host copies are released.
int complete_host_staged(MPI_Win win, int target, int mpi_result) {
  if (mpi_result != MPI_SUCCESS || host_staged_count.load(std::memory_order_acquire) == 0) return mpi_result;
  std::vector<std::shared_ptr<HostStaged>> done;
  {
    std::lock_guard<std::mutex> lock(host_staged_mutex);
    auto it = host_staged().find(win);
    if (it == host_staged().end()) return mpi_result;
    auto& pending = it->second;
    // Issue order is kept: overlapping results land as the operations did.
    auto kept = std::stable_partition(pending.begin(), pending.end(), [&](const std::shared_ptr<HostStaged>& s) {
      return target != kEveryTarget && s->target != target;
    });
    done.assign(std::make_move_iterator(kept), std::make_move_iterator(pending.end()));
    pending.erase(kept, pending.end());
    if (pending.empty()) host_staged().erase(it);
    host_staged_count.fetch_sub(static_cast<int>(done.size()), std::memory_order_release);
  }
  int first_error = MPI_SUCCESS;
  for (const auto& s : done) {
    const int rc = s->deliver();
    if (first_error == MPI_SUCCESS) first_error = rc;
  }
  return first_error;
}

// MPI_Win_free: every epoch is over, so nothing is left to deliver.
void release_host_staged(MPI_Win win) {
  if (host_staged_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(host_staged_mutex);
  auto it = host_staged().find(win);
  if (it == host_staged().end()) return;
  host_staged_count.fetch_sub(static_cast<int>(it->second.size()), std::memory_order_release);
  host_staged().erase(it);
}

}  // namespace

Window* engine_window(MPI_Win win) {
  DeviceWindow* dw = find_window(win);
  return dw ? dw->window.get() : nullptr;
}

// ---- Creation and release -------------------------------------------------

int handle_Win_create(void* base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  auto pmpi = [&] { return PMPI_Win_create(base, size, disp_unit, info, comm, win); };
  const bool device_here = size > 0 && is_device_memory(base);
  bool any_device = false, any_host = false;
  if (params().route == "pmpi" || size < 0 || disp_unit <= 0 || !win ||
      !agree_on_memory(comm, device_here, size > 0 && !device_here, &any_device, &any_host) || !any_device) {
    record_route(FunctionId::kWin_create, {Route::kPmpi, "no device memory in the window"});
    return pmpi();
  }
  record_route(FunctionId::kWin_create, {Route::kEngine, "device memory in the window"});
  if (any_host) {
    FERRY_WARN(Pgas, "MPI_Win_create: some ranks offer device memory and others host memory; a window takes one kind");
    return raise_error(comm, MPI_ERR_WIN);
  }
  return create_device_window(FunctionId::kWin_create, size > 0 ? base : nullptr, size, disp_unit, info, comm,
                              MPI_WIN_FLAVOR_CREATE, nullptr, win);
}

int handle_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr, MPI_Win* win) {
  return allocate_window(FunctionId::kWin_allocate, size, disp_unit, info, comm, baseptr, win,
                         MPI_WIN_FLAVOR_ALLOCATE);
}

int handle_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr,
                               MPI_Win* win) {
  return allocate_window(FunctionId::kWin_allocate_shared, size, disp_unit, info, comm, baseptr, win,
                         MPI_WIN_FLAVOR_SHARED);
}

// A dynamic window is Ferry's when any rank asks for device memory in info
// (there is no memory to look at yet): every rank must then attach device
// memory only.
int handle_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  bool any_device = false, any_host = false;
  if (params().route == "pmpi" || !win ||
      !agree_on_memory(comm, info_wants_device(info), false, &any_device, &any_host) || !any_device) {
    record_route(FunctionId::kWin_create_dynamic, {Route::kPmpi, "no rank asked for device memory"});
    return PMPI_Win_create_dynamic(info, comm, win);
  }
  record_route(FunctionId::kWin_create_dynamic, {Route::kEngine, "device memory asked for"});
  return create_device_window(FunctionId::kWin_create_dynamic, nullptr, 0, 1, info, comm, MPI_WIN_FLAVOR_DYNAMIC,
                              nullptr, win);
}

int handle_Win_attach(MPI_Win win, void* base, MPI_Aint size) {
  return on_window(FunctionId::kWin_attach, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (!w.dynamic()) return fail(win, MPI_ERR_RMA_FLAVOR);
    if (!base || size < 0) return fail(win, MPI_ERR_ARG);
    // Peers map the region through its allocation, which must hold all of
    // it. Host memory cannot be reached that way: MPI_ERR_ARG.
    const gpu::PointerInfo info = gpu::classify(base);
    const auto begin = reinterpret_cast<std::uintptr_t>(base);
    if (size > 0 && (info.kind != gpu::MemoryKind::kDevice ||
                     (info.size && begin + static_cast<std::uintptr_t>(size) > info.base + info.size))) {
      FERRY_WARN(Pgas, "MPI_Win_attach: a device dynamic window takes device memory within one allocation");
      return fail(win, MPI_ERR_ARG);
    }
    const Status status = w.attach(base, static_cast<std::size_t>(size));
    // Overlapping an attached region, or too many regions.
    if (status == Status::kInvalidArgument || status == Status::kOutOfMemory) return fail(win, MPI_ERR_RMA_ATTACH);
    return engine_result(win, FunctionId::kWin_attach, status);
  }, [&] { return PMPI_Win_attach(win, base, size); });
}

int handle_Win_detach(MPI_Win win, const void* base) {
  return on_window(FunctionId::kWin_detach, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (!w.dynamic()) return fail(win, MPI_ERR_RMA_FLAVOR);
    // No attached region starts at base.
    if (w.detach(base) != Status::kOk) return fail(win, MPI_ERR_ARG);
    return MPI_SUCCESS;
  }, [&] { return PMPI_Win_detach(win, base); });
}

int handle_Win_free(MPI_Win* win) {
  DeviceWindow* dw = win ? find_window(*win) : nullptr;
  record_route(FunctionId::kWin_free, dw ? RouteDecision{Route::kEngine, "device window"}
                                         : RouteDecision{Route::kPmpi, "not a device window"});
  if (!dw) {
    const MPI_Win freed = win ? *win : MPI_WIN_NULL;
    const int rc = PMPI_Win_free(win);
    if (rc == MPI_SUCCESS) release_host_staged(freed);
    return rc;
  }
  {
    std::lock_guard<std::mutex> lock(dw->mutex);
    if (dw->window->any_lock_held() || dw->window->access_group_open() || dw->window->exposure_open())
      return raise_win_error(*win, MPI_ERR_RMA_SYNC);
    if (Status status = dw->window->close(); !ok(status)) return engine_result(*win, FunctionId::kWin_free, status);
  }
  {
    std::unique_lock<std::shared_mutex> lock(windows_mutex);
    device_windows().erase(*win);
    device_window_count.fetch_sub(1, std::memory_order_release);
  }
  gpu::Backend* backend = gpu::active_backend();
  void* allocated = dw->allocated;
  // First the real MPI's window: its attributes (the device handle's tables)
  // are released while the engine window they refer to still exists.
  const int rc = PMPI_Win_free(win);
  PMPI_Group_free(&dw->group);
  delete dw;  // unmaps the peers' memory
  if (allocated && backend) backend->device_free(allocated);
  return rc;
}

int handle_Win_shared_query(MPI_Win win, int rank, MPI_Aint* size, int* disp_unit, void* baseptr) {
  return on_window(FunctionId::kWin_shared_query, win, [&](DeviceWindow& dw) {
    const Window& w = *dw.window;
    if (rank == MPI_PROC_NULL) {
      // The lowest rank with memory, as MPI specifies.
      rank = 0;
      while (rank < w.size() - 1 && w.bytes(rank) == 0) ++rank;
    }
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    *size = static_cast<MPI_Aint>(w.bytes(rank));
    *disp_unit = w.disp_unit(rank);
    *static_cast<void**>(baseptr) = w.memory(rank);
    return MPI_SUCCESS;
  }, [&] { return PMPI_Win_shared_query(win, rank, size, disp_unit, baseptr); });
}

int handle_Win_get_attr(MPI_Win win, int keyval, void* attribute_val, int* flag) {
  DeviceWindow* dw = find_window(win);
  record_route(FunctionId::kWin_get_attr, dw ? RouteDecision{Route::kEngine, "device window"}
                                             : RouteDecision{Route::kPmpi, "not a device window"});
  if (!dw || !attribute_val || !flag) return PMPI_Win_get_attr(win, keyval, attribute_val, flag);
  // The predefined attributes describe the device memory, not the real
  // MPI's empty window.
  void* value = nullptr;
  switch (keyval) {
    case MPI_WIN_BASE: value = dw->base; break;
    case MPI_WIN_SIZE: value = &dw->size; break;
    case MPI_WIN_DISP_UNIT: value = &dw->disp_unit; break;
    case MPI_WIN_CREATE_FLAVOR: value = &dw->flavor; break;
    case MPI_WIN_MODEL: value = &dw->model; break;
    default: return PMPI_Win_get_attr(win, keyval, attribute_val, flag);
  }
  *static_cast<void**>(attribute_val) = value;
  *flag = 1;
  return MPI_SUCCESS;
}

// ---- Data movement -------------------------------------------------------

namespace {
constexpr HostOperand kNoOperand{nullptr, 0, MPI_DATATYPE_NULL};
}  // namespace

int handle_Put(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
               MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win) {
  return on_data_window(FunctionId::kPut, win, [&](DeviceWindow& dw) {
    return move(dw, win, FunctionId::kPut, const_cast<void*>(origin_addr), origin_count, origin_datatype, target_rank,
                target_disp, target_count, target_datatype, false, false);
  }, [&] {
    return on_host_window(FunctionId::kPut, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, kNoOperand, nullptr, [&](const void* o, const void*, void*) {
      return PMPI_Put(o, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype,
                      win);
    });
  });
}

int handle_Get(void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
               MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win) {
  return on_data_window(FunctionId::kGet, win, [&](DeviceWindow& dw) {
    return move(dw, win, FunctionId::kGet, origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                target_count, target_datatype, false, true);
  }, [&] {
    return on_host_window(FunctionId::kGet, win, target_rank, kNoOperand, kNoOperand,
                          {origin_addr, origin_count, origin_datatype}, nullptr, [&](const void*, const void*, void* r) {
      return PMPI_Get(r, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win);
    });
  });
}

int handle_Accumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                      MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                      MPI_Win win) {
  return on_data_window(FunctionId::kAccumulate, win, [&](DeviceWindow& dw) {
    if (op == MPI_NO_OP) return fail(win, MPI_ERR_OP);  // only the fetching calls take NO_OP
    return get_accumulate(dw, win, FunctionId::kAccumulate, origin_addr, origin_count, origin_datatype, nullptr,
                          0, MPI_DATATYPE_NULL, target_rank, target_disp, target_count, target_datatype, op, false);
  }, [&] {
    return on_host_window(FunctionId::kAccumulate, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, kNoOperand, nullptr, [&](const void* o, const void*, void*) {
      return PMPI_Accumulate(o, origin_count, origin_datatype, target_rank, target_disp, target_count,
                             target_datatype, op, win);
    });
  });
}

int handle_Get_accumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype,
                          void* result_addr, int result_count, MPI_Datatype result_datatype, int target_rank,
                          MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                          MPI_Win win) {
  return on_data_window(FunctionId::kGet_accumulate, win, [&](DeviceWindow& dw) {
    return get_accumulate(dw, win, FunctionId::kGet_accumulate, origin_addr, origin_count, origin_datatype,
                          result_addr, result_count, result_datatype, target_rank, target_disp, target_count,
                          target_datatype, op, false);
  }, [&] {
    return on_host_window(FunctionId::kGet_accumulate, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, {result_addr, result_count, result_datatype}, nullptr,
                          [&](const void* o, const void*, void* r) {
      return PMPI_Get_accumulate(o, origin_count, origin_datatype, r, result_count, result_datatype, target_rank,
                                 target_disp, target_count, target_datatype, op, win);
    });
  });
}

int handle_Fetch_and_op(const void* origin_addr, void* result_addr, MPI_Datatype datatype, int target_rank,
                        MPI_Aint target_disp, MPI_Op op, MPI_Win win) {
  return on_data_window(FunctionId::kFetch_and_op, win, [&](DeviceWindow& dw) {
    return get_accumulate(dw, win, FunctionId::kFetch_and_op, origin_addr, 1, datatype, result_addr, 1, datatype,
                          target_rank, target_disp, 1, datatype, op, false);
  }, [&] {
    return on_host_window(FunctionId::kFetch_and_op, win, target_rank, {origin_addr, 1, datatype}, kNoOperand,
                          {result_addr, 1, datatype}, nullptr, [&](const void* o, const void*, void* r) {
      return PMPI_Fetch_and_op(o, r, datatype, target_rank, target_disp, op, win);
    });
  });
}

int handle_Compare_and_swap(const void* origin_addr, const void* compare_addr, void* result_addr,
                            MPI_Datatype datatype, int target_rank, MPI_Aint target_disp, MPI_Win win) {
  return on_data_window(FunctionId::kCompare_and_swap, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (target_rank == MPI_PROC_NULL) return MPI_SUCCESS;
    Target t;
    if (int rc = check_target(w, target_rank, target_disp, 1, datatype, &t); rc != MPI_SUCCESS) return fail(win, rc);
    // MPI allows integer, logical and byte types only: no floating point.
    DataType element;
    int element_size = 0;
    const bool integer = datatype == MPI_BYTE || datatype == MPI_C_BOOL ||
                         (engine_data_type(datatype, &element) && reduction_defined(element, ReduceOp::kBand));
    if (!integer || PMPI_Type_size(datatype, &element_size) != MPI_SUCCESS) return fail(win, MPI_ERR_TYPE);
    if (!origin_addr || !compare_addr || !result_addr) return fail(win, MPI_ERR_BUFFER);
    return engine_result(win, FunctionId::kCompare_and_swap,
                         w.compare_and_swap(origin_addr, compare_addr, result_addr, target_rank, t.at,
                                            static_cast<std::size_t>(element_size)));
  }, [&] {
    return on_host_window(FunctionId::kCompare_and_swap, win, target_rank, {origin_addr, 1, datatype},
                          {compare_addr, 1, datatype}, {result_addr, 1, datatype}, nullptr,
                          [&](const void* o, const void* c, void* r) {
      return PMPI_Compare_and_swap(o, c, r, datatype, target_rank, target_disp, win);
    });
  });
}

// On device windows the request-based calls complete the operation before
// returning; on host windows the real MPI's request completes it.
int handle_Rput(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win,
                MPI_Request* request) {
  return on_data_window(FunctionId::kRput, win, [&](DeviceWindow& dw) {
    int rc = move(dw, win, FunctionId::kRput, const_cast<void*>(origin_addr), origin_count, origin_datatype,
                  target_rank, target_disp, target_count, target_datatype, true, false);
    if (rc == MPI_SUCCESS) rc = engine_result(win, FunctionId::kRput, dw.window->flush());
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, [&] {
    return on_host_window(FunctionId::kRput, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, kNoOperand, request, [&](const void* o, const void*, void*) {
      return PMPI_Rput(o, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype,
                       win, request);
    });
  });
}

int handle_Rget(void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win,
                MPI_Request* request) {
  return on_data_window(FunctionId::kRget, win, [&](DeviceWindow& dw) {
    int rc = move(dw, win, FunctionId::kRget, origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                  target_count, target_datatype, true, true);
    if (rc == MPI_SUCCESS) rc = engine_result(win, FunctionId::kRget, dw.window->flush());
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, [&] {
    return on_host_window(FunctionId::kRget, win, target_rank, kNoOperand, kNoOperand,
                          {origin_addr, origin_count, origin_datatype}, request,
                          [&](const void*, const void*, void* r) {
      return PMPI_Rget(r, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype,
                       win, request);
    });
  });
}

int handle_Raccumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                       MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                       MPI_Win win, MPI_Request* request) {
  return on_data_window(FunctionId::kRaccumulate, win, [&](DeviceWindow& dw) {
    if (op == MPI_NO_OP) return fail(win, MPI_ERR_OP);
    const int rc = get_accumulate(dw, win, FunctionId::kRaccumulate, origin_addr, origin_count, origin_datatype,
                                  nullptr, 0, MPI_DATATYPE_NULL, target_rank, target_disp, target_count,
                                  target_datatype, op, true);
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, [&] {
    return on_host_window(FunctionId::kRaccumulate, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, kNoOperand, request, [&](const void* o, const void*, void*) {
      return PMPI_Raccumulate(o, origin_count, origin_datatype, target_rank, target_disp, target_count,
                              target_datatype, op, win, request);
    });
  });
}

int handle_Rget_accumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype,
                           void* result_addr, int result_count, MPI_Datatype result_datatype, int target_rank,
                           MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                           MPI_Win win, MPI_Request* request) {
  return on_data_window(FunctionId::kRget_accumulate, win, [&](DeviceWindow& dw) {
    const int rc = get_accumulate(dw, win, FunctionId::kRget_accumulate, origin_addr, origin_count,
                                  origin_datatype, result_addr, result_count, result_datatype, target_rank,
                                  target_disp, target_count, target_datatype, op, true);
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, [&] {
    return on_host_window(FunctionId::kRget_accumulate, win, target_rank,
                          {origin_addr, origin_count, origin_datatype}, kNoOperand,
                          {result_addr, result_count, result_datatype}, request,
                          [&](const void* o, const void*, void* r) {
      return PMPI_Rget_accumulate(o, origin_count, origin_datatype, r, result_count, result_datatype, target_rank,
                                  target_disp, target_count, target_datatype, op, win, request);
    });
  });
}

// ---- Synchronization -----------------------------------------------------
// On host windows, the calls that complete operations deliver the staged
// results (complete_host_staged).

int handle_Win_fence(int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_fence, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (w.any_lock_held() || w.access_group_open() || w.exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_fence, w.fence(!(assert & MPI_MODE_NOSUCCEED)));
  }, [&] { return complete_host_staged(win, kEveryTarget, PMPI_Win_fence(assert, win)); });
}

int handle_Win_post(MPI_Group group, int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_post, win, [&](DeviceWindow& dw) {
    if (dw.window->exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
    std::vector<int> origins;
    if (int rc = window_ranks(dw, group, &origins); rc != MPI_SUCCESS) return fail(win, rc);
    return engine_result(win, FunctionId::kWin_post, dw.window->post(origins));
  }, [&] { return PMPI_Win_post(group, assert, win); });
}

int handle_Win_start(MPI_Group group, int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_start, win, [&](DeviceWindow& dw) {
    if (dw.window->access_group_open() || dw.window->any_lock_held()) return fail(win, MPI_ERR_RMA_SYNC);
    std::vector<int> targets;
    if (int rc = window_ranks(dw, group, &targets); rc != MPI_SUCCESS) return fail(win, rc);
    return engine_result(win, FunctionId::kWin_start, dw.window->start(targets));
  }, [&] { return PMPI_Win_start(group, assert, win); });
}

int handle_Win_complete(MPI_Win win) {
  return on_window(FunctionId::kWin_complete, win, [&](DeviceWindow& dw) {
    if (!dw.window->access_group_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_complete, dw.window->complete());
  }, [&] { return complete_host_staged(win, kEveryTarget, PMPI_Win_complete(win)); });
}

int handle_Win_wait(MPI_Win win) {
  return on_window(FunctionId::kWin_wait, win, [&](DeviceWindow& dw) {
    if (!dw.window->exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_wait, dw.window->wait());
  }, [&] { return PMPI_Win_wait(win); });
}

int handle_Win_test(MPI_Win win, int* flag) {
  return on_window(FunctionId::kWin_test, win, [&](DeviceWindow& dw) {
    if (!dw.window->exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
    bool done = false;
    const int rc = engine_result(win, FunctionId::kWin_test, dw.window->test(&done));
    *flag = done;
    return rc;
  }, [&] { return PMPI_Win_test(win, flag); });
}

int handle_Win_lock(int lock_type, int rank, int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_lock, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (lock_type != MPI_LOCK_EXCLUSIVE && lock_type != MPI_LOCK_SHARED) return fail(win, MPI_ERR_LOCKTYPE);
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    if (w.locked(rank) || w.access_group_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_lock, w.lock(rank, lock_type == MPI_LOCK_EXCLUSIVE));
  }, [&] { return PMPI_Win_lock(lock_type, rank, assert, win); });
}

int handle_Win_unlock(int rank, MPI_Win win) {
  return on_window(FunctionId::kWin_unlock, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    if (!w.locked(rank) || w.lock_all_held()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_unlock, w.unlock(rank));
  }, [&] { return complete_host_staged(win, rank, PMPI_Win_unlock(rank, win)); });
}

int handle_Win_lock_all(int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_lock_all, win, [&](DeviceWindow& dw) {
    if (dw.window->any_lock_held() || dw.window->access_group_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_lock_all, dw.window->lock_all());
  }, [&] { return PMPI_Win_lock_all(assert, win); });
}

int handle_Win_unlock_all(MPI_Win win) {
  return on_window(FunctionId::kWin_unlock_all, win, [&](DeviceWindow& dw) {
    if (!dw.window->lock_all_held()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_unlock_all, dw.window->unlock_all());
  }, [&] { return complete_host_staged(win, kEveryTarget, PMPI_Win_unlock_all(win)); });
}

namespace {

// Flush and flush_local: this engine completes operations at the target and
// at the origin together, so both are the same.
int flush_one(MPI_Win win, FunctionId id, int rank) {
  return on_window(id, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    if (!w.passive_access(rank)) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, id, w.flush());
  }, [&] {
    return complete_host_staged(win, rank,
                                id == FunctionId::kWin_flush ? PMPI_Win_flush(rank, win) : PMPI_Win_flush_local(rank, win));
  });
}

int flush_every(MPI_Win win, FunctionId id) {
  return on_window(id, win, [&](DeviceWindow& dw) {
    if (!dw.window->any_lock_held()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, id, dw.window->flush());
  }, [&] {
    return complete_host_staged(win, kEveryTarget,
                                id == FunctionId::kWin_flush_all ? PMPI_Win_flush_all(win) : PMPI_Win_flush_local_all(win));
  });
}

}  // namespace

int handle_Win_flush(int rank, MPI_Win win) { return flush_one(win, FunctionId::kWin_flush, rank); }
int handle_Win_flush_local(int rank, MPI_Win win) { return flush_one(win, FunctionId::kWin_flush_local, rank); }
int handle_Win_flush_all(MPI_Win win) { return flush_every(win, FunctionId::kWin_flush_all); }
int handle_Win_flush_local_all(MPI_Win win) { return flush_every(win, FunctionId::kWin_flush_local_all); }

int handle_Win_sync(MPI_Win win) {
  return on_window(FunctionId::kWin_sync, win, [&](DeviceWindow&) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return MPI_SUCCESS;
  }, [&] { return PMPI_Win_sync(win); });
}

}  // namespace ferry::shim
