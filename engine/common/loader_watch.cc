#include "engine/common/loader_watch.h"

#include <dlfcn.h>

#include <string>

namespace ferry {
namespace {

const link_map* main_program() {
  static const link_map* const program = [] {
    link_map* map = nullptr;
    void* self = dlopen(nullptr, RTLD_LAZY | RTLD_NOLOAD);
    return self && dlinfo(self, RTLD_DI_LINKMAP, &map) == 0 ? map : nullptr;
  }();
  return program;
}

struct LastObject {
  const link_map* first;
  const link_map* last;
  std::string name;
};

}  // namespace

void LoaderWatch::mark() {
  LastObject found{main_program(), nullptr, {}};
  if (!found.first) {
    last_.store(nullptr, std::memory_order_release);
    return;
  }
  // dl_iterate_phdr holds the lock under which the loader links and unlinks
  // objects, so the walk sees a whole list.
  dl_iterate_phdr(
      [](dl_phdr_info*, size_t, void* data) {
        auto* found = static_cast<LastObject*>(data);
        const link_map* map = found->first;
        while (map->l_next) map = map->l_next;
        found->last = map;
        found->name = map->l_name ? map->l_name : "";
        return 1;  // one walk is enough
      },
      &found);
  // The program itself never goes away; any other object is held by a
  // reference of ours (never dropped: it keeps that one object loaded), so
  // its l_next stays readable.
  bool held = found.last == found.first;
  if (!held && !found.name.empty()) {
    if (void* handle = dlopen(found.name.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      link_map* map = nullptr;
      held = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map == found.last;
      if (!held) dlclose(handle);
    }
  }
  last_.store(held ? found.last : nullptr, std::memory_order_release);
}

}  // namespace ferry
