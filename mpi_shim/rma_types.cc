#include "mpi_shim/rma_types.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>

#include "mpi_shim/rma.h"
#include "mpi_shim/translate.h"

namespace ferry::shim {
namespace {

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

}  // namespace

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

int describe(int count, MPI_Datatype type, Operand* out) {
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = layout_of(type, &out->layout); rc != MPI_SUCCESS) return rc;
  const TypeMap& map = *out->layout.map;
  out->bytes = static_cast<std::size_t>(count) * map.size;
  if (out->bytes == 0) return MPI_SUCCESS;
  // A dense type is one run however many elements.
  const bool dense =
      map.blocks.size() == 1 && map.blocks[0].offset == 0 && static_cast<MPI_Aint>(map.blocks[0].bytes) == map.extent;
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

std::vector<Window::Segment> pair_runs(const Operand& target, const Operand* origin, const Operand* result) {
  struct Cursor {
    const std::vector<TypeMap::Block>* runs = nullptr;
    std::size_t index = 0, used = 0;
    std::size_t left() const { return runs && index < runs->size() ? (*runs)[index].bytes - used : SIZE_MAX; }
    MPI_Aint at() const {
      return runs && index < runs->size() ? (*runs)[index].offset + static_cast<MPI_Aint>(used) : 0;
    }
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

MPI_Datatype basic_type(MPI_Datatype type) {
  int integers = 0, addresses = 0, types = 0, combiner = 0;
  if (type == MPI_DATATYPE_NULL ||
      PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner) != MPI_SUCCESS)
    return MPI_DATATYPE_NULL;
  if (combiner == MPI_COMBINER_NAMED) return type;
  std::vector<int> ints(integers);
  std::vector<MPI_Aint> addrs(addresses);
  std::vector<MPI_Datatype> inner(types);
  if (PMPI_Type_get_contents(type, integers, addresses, types, ints.data(), addrs.data(), inner.data()) != MPI_SUCCESS)
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

namespace {

std::once_flag verdict_window_once;
MPI_Win verdict_window = MPI_WIN_NULL;

MPI_Win verdict_win() {
  std::call_once(verdict_window_once, [] {
    void* unused = nullptr;
    MPI_Win win = MPI_WIN_NULL;
    if (PMPI_Win_allocate(0, 1, MPI_INFO_NULL, MPI_COMM_SELF, &unused, &win) != MPI_SUCCESS) return;
    PMPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    verdict_window = win;
  });
  return verdict_window;
}

int error_class(int rc) {
  int cls = rc;
  if (rc != MPI_SUCCESS) PMPI_Error_class(rc, &cls);
  return cls;
}

}  // namespace

int real_mpi_accumulate_verdict(const void* origin, int origin_count, MPI_Datatype origin_type, void* result,
                                int result_count, MPI_Datatype result_type, int target_count, MPI_Datatype target_type,
                                MPI_Op op) {
  const MPI_Win win = verdict_win();
  if (win == MPI_WIN_NULL) return -1;
  if (result_type == MPI_DATATYPE_NULL)
    return error_class(
        PMPI_Accumulate(origin, origin_count, origin_type, MPI_PROC_NULL, 0, target_count, target_type, op, win));
  return error_class(PMPI_Get_accumulate(origin, origin_count, origin_type, result, result_count, result_type,
                                         MPI_PROC_NULL, 0, target_count, target_type, op, win));
}

int real_mpi_compare_and_swap_verdict(const void* origin, const void* compare, void* result, MPI_Datatype type) {
  const MPI_Win win = verdict_win();
  if (win == MPI_WIN_NULL) return -1;
  return error_class(PMPI_Compare_and_swap(origin, compare, result, type, MPI_PROC_NULL, 0, win));
}

void release_verdict_window() {
  if (verdict_window != MPI_WIN_NULL) PMPI_Win_free(&verdict_window);
}

bool reduction_element(MPI_Datatype basic, DataType* element) {
  if (engine_data_type(basic, element)) return true;
  if (basic == MPI_CHAR) {
    *element = DataType::kInt8;
    return true;
  }
  static_assert(sizeof(MPI_Aint) == 8 && sizeof(MPI_Offset) == 8 && sizeof(MPI_Count) == 8,
                "MPI_AINT, MPI_OFFSET and MPI_COUNT reduce as 64-bit integers");
  if (basic == MPI_AINT || basic == MPI_OFFSET || basic == MPI_COUNT) {
    *element = DataType::kInt64;
    return true;
  }
  return false;
}

bool engine_reduction(MPI_Datatype basic, MPI_Op op, DataType* element, ReduceOp* reduce) {
  return reduction_element(basic, element) && engine_reduce_op(op, reduce) && reduction_defined(*element, *reduce);
}

Window::HostCombine host_reduction(MPI_Datatype basic, MPI_Op op) {
  return [basic, op](const void* origin, void* target, std::size_t bytes) {
    int size = 0, dense_size = 0;
    MPI_Aint lb = 0, extent = 0;
    if (PMPI_Type_size(basic, &size) != MPI_SUCCESS || size <= 0 ||
        PMPI_Type_get_extent(basic, &lb, &extent) != MPI_SUCCESS || bytes % static_cast<std::size_t>(size) != 0 ||
        bytes / static_cast<std::size_t>(size) > INT_MAX)
      return Status::kInvalidArgument;
    const int count = static_cast<int>(bytes / static_cast<std::size_t>(size));
    if (dense_data_type(basic, &dense_size))
      return PMPI_Reduce_local(origin, target, count, basic, op) == MPI_SUCCESS ? Status::kOk
                                                                                : Status::kInvalidArgument;
    // Pair types with holes (MPI_DOUBLE_INT, ...): reduce them laid out at
    // their extent, as MPI does.
    const std::size_t laid_out = static_cast<std::size_t>(count) * static_cast<std::size_t>(extent);
    std::vector<char> in(laid_out), inout(laid_out);
    char* in_base = in.data() - lb;
    char* inout_base = inout.data() - lb;
    const int packed = static_cast<int>(bytes);
    int position = 0;
    if (PMPI_Unpack(origin, packed, &position, in_base, count, basic, MPI_COMM_SELF) != MPI_SUCCESS)
      return Status::kInvalidArgument;
    position = 0;
    if (PMPI_Unpack(target, packed, &position, inout_base, count, basic, MPI_COMM_SELF) != MPI_SUCCESS ||
        PMPI_Reduce_local(in_base, inout_base, count, basic, op) != MPI_SUCCESS)
      return Status::kInvalidArgument;
    position = 0;
    return PMPI_Pack(inout_base, count, basic, target, packed, &position, MPI_COMM_SELF) == MPI_SUCCESS
               ? Status::kOk
               : Status::kInvalidArgument;
  };
}

}  // namespace ferry::shim
