// Memory registered with a network device, kept between calls (as NCCL's
// and UCX's registration caches): a buffer sent from again is not
// registered again. Ranges are whole pages; a request that lies within a
// cached range reuses it. At most `capacity` ranges stay registered: when
// a new one is needed, the least recently used range that no transfer holds
// is deregistered. Memory the application frees must be invalidated
// (invalidate) before its addresses are reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>

#include "engine/common/status.h"

namespace ferry {

struct Registration {
  std::uintptr_t base = 0;  // page-aligned
  std::size_t bytes = 0;    // whole pages
  bool device = false;      // device memory (dma-buf or peer-memory registration)
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
  void* handle = nullptr;  // the registrar's (ibv_mr*)
  // The address the network device knows base by (0: base itself; the
  // emulated device's host view of its memory, say).
  std::uintptr_t wire = 0;
};

// What registers a range with the device: the ib provider's protection
// domain (ibv_reg_dmabuf_mr for device memory, else ibv_reg_mr).
class Registrar {
 public:
  virtual ~Registrar() = default;
  // Fills the keys and handle of *range (base, bytes and device set).
  virtual Status register_range(Registration* range) = 0;
  virtual void deregister_range(const Registration& range) = 0;
};

class RegistrationCache {
 public:
  RegistrationCache(Registrar& registrar, std::size_t capacity, std::size_t page_bytes = 4096)
      : registrar_(registrar), capacity_(capacity < 1 ? 1 : capacity), page_(page_bytes) {}
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // A registration covering [ptr, ptr + bytes), held until release().
  // kOutOfMemory when every cached range is held and none can go.
  Status acquire(const void* ptr, std::size_t bytes, bool device, const Registration** out);
  void release(const Registration* registration);
  // Memory [ptr, ptr + bytes) was freed: overlapping ranges are
  // deregistered now, or when their last holder releases them.
  void invalidate(const void* ptr, std::size_t bytes);

  struct Counts {
    std::uint64_t hits, misses, evictions;
    std::size_t cached;
  };
  Counts counts() const { return {hits_, misses_, evictions_, entries_.size()}; }

 private:
  struct Entry {
    Registration range;
    int holders = 0;
    bool stale = false;  // invalidated while held
  };
  void drop(std::list<Entry>::iterator entry);

  Registrar& registrar_;
  std::size_t capacity_;
  std::size_t page_;
  std::list<Entry> entries_;  // most recently used first
  std::uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace ferry
