// LoaderWatch against the real dynamic loader: a library loaded after a
// mark is seen, and the object a mark holds stays loaded.
#include "engine/common/loader_watch.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(LoaderWatch, SeesALibraryLoadedAfterTheMark) {
  LoaderWatch watch;
  EXPECT_TRUE(watch.changed()) << "nothing is known before the first mark";
  watch.mark();
  EXPECT_FALSE(watch.changed());

  void* probe = dlopen(FERRY_LOADER_WATCH_PROBE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(probe, nullptr) << dlerror();
  EXPECT_TRUE(watch.changed());
  watch.mark();
  EXPECT_FALSE(watch.changed());

  // The mark holds the probe (the loader's last object): closing it here
  // leaves it loaded, and the watch still sees nothing new.
  ASSERT_EQ(dlclose(probe), 0);
  void* still = dlopen(FERRY_LOADER_WATCH_PROBE, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(still, nullptr);
  if (still) dlclose(still);
  EXPECT_FALSE(watch.changed());
}

}  // namespace
}  // namespace ferry
