// Tells, with two loads and no lock, whether the dynamic loader has added
// any object to the process since the last look.
//
// The loader appends every object it loads to the end of the main
// namespace's link_map list (the list debuggers read through r_debug). A
// look remembers the object then last and holds a reference on it, so it
// stays loaded: while its l_next is still null, nothing was loaded since.
// Looking for a library (dlopen with RTLD_NOLOAD) takes the loader's lock;
// this lets a caller skip that until something new arrived.
#pragma once

#include <link.h>

#include <atomic>

namespace ferry {

class LoaderWatch {
 public:
  // False only when nothing was loaded since the last mark(); true before
  // the first mark() and whenever the last one could not hold its object.
  bool changed() const {
    const link_map* last = last_.load(std::memory_order_acquire);
    return last == nullptr || __atomic_load_n(&last->l_next, __ATOMIC_ACQUIRE) != nullptr;
  }

  // Remembers the loader's last object now. Call it before looking for
  // what the caller wants, so an object loaded meanwhile counts as changed.
  // Callers serialize mark().
  void mark();

 private:
  std::atomic<const link_map*> last_{nullptr};
};

}  // namespace ferry
