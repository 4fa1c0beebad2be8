#include "engine/transport/registration_cache.h"

#include <iterator>

namespace ferry {

RegistrationCache::~RegistrationCache() {
  while (!entries_.empty()) drop(entries_.begin());
}

void RegistrationCache::drop(std::list<Entry>::iterator entry) {
  registrar_.deregister_range(entry->range);
  entries_.erase(entry);
}

Status RegistrationCache::acquire(const void* ptr, std::size_t bytes, bool device, const Registration** out) {
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  if (bytes == 0 || start + bytes < start) return Status::kInvalidArgument;
  const std::uintptr_t base = start / page_ * page_;
  const std::uintptr_t end = (start + bytes + page_ - 1) / page_ * page_;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const Registration& r = it->range;
    if (it->stale || r.device != device || base < r.base || end > r.base + r.bytes) continue;
    ++hits_;
    ++it->holders;
    entries_.splice(entries_.begin(), entries_, it);
    *out = &entries_.front().range;
    return Status::kOk;
  }
  ++misses_;
  if (entries_.size() >= capacity_) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->holders == 0) victim = it;  // the last one free: least recently used
    if (victim == entries_.end()) return Status::kOutOfMemory;
    ++evictions_;
    drop(victim);
  }
  Entry entry;
  entry.range.base = base;
  entry.range.bytes = end - base;
  entry.range.device = device;
  FERRY_CHECK(registrar_.register_range(&entry.range));
  entry.holders = 1;
  entries_.push_front(entry);
  *out = &entries_.front().range;
  return Status::kOk;
}

void RegistrationCache::release(const Registration* registration) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (&it->range != registration) continue;
    if (--it->holders == 0 && it->stale) drop(it);
    return;
  }
}

void RegistrationCache::invalidate(const void* ptr, std::size_t bytes) {
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const auto next = std::next(it);
    const bool overlaps = start < it->range.base + it->range.bytes && it->range.base < start + bytes;
    if (overlaps) {
      if (it->holders == 0) {
        drop(it);
      } else {
        it->stale = true;
      }
    }
    it = next;
  }
}

}  // namespace ferry
