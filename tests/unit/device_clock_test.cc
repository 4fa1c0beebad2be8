// A device clock put on the system clock by the brackets of the items it ran
// (engine/core/gpu_span.h): a clock that is the system clock stays as it is;
// one with an offset lands every stamp within its item's bracket; a clock
// that jumps starts its bounds again.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

#include "engine/core/gpu_span.h"

namespace ferry {
namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

TEST(DeviceClock, AClockOnTheSystemClockIsKept) {
  DeviceClock clock;
  const std::int64_t t = 1'800'000'000 * kSecond;
  clock.narrow(t + 3'000, t + 9'000, t, t + 12'000);
  clock.narrow(t + 50'500, t + 51'000, t + 50'000, t + 60'000);
  EXPECT_EQ(clock.to_system_ns(t + 3'000), t + 3'000);
}

TEST(DeviceClock, AnOffsetClockLandsItsStampsWithinTheirBrackets) {
  DeviceClock clock;
  const std::int64_t t = 1'800'000'000 * kSecond, offset = 5 * kSecond + 123'456;
  // Items that ran 2-4 us after their post and were seen 1-7 us after their end.
  const std::int64_t runs[][4] = {{0, 2'000, 10'000, 17'000}, {100'000, 104'000, 104'500, 105'500},
                                  {200'000, 203'000, 203'200, 204'200}};
  for (const auto& run : runs) {
    const std::int64_t posted = t + run[0], start = t + run[1] + offset, end = t + run[2] + offset,
                       seen = t + run[3];
    clock.narrow(start, end, posted, seen);
    EXPECT_GE(clock.to_system_ns(start), posted);
    EXPECT_LE(clock.to_system_ns(end), seen);
  }
  // The middle of the bounds met so far: the offset within 1.5 us of the true one.
  EXPECT_LE(std::llabs(clock.to_system_ns(t + offset) - t), 1'500);
}

TEST(DeviceClock, AClockThatJumpsStartsItsBoundsAgain) {
  DeviceClock clock;
  const std::int64_t t = 1'800'000'000 * kSecond;
  clock.narrow(t + 1'000, t + 2'000, t, t + 3'000);
  const std::int64_t jump = 7 * kSecond;
  clock.narrow(t + jump + 101'000, t + jump + 102'000, t + 100'000, t + 103'000);
  EXPECT_GE(clock.to_system_ns(t + jump + 101'000), t + 100'000);
  EXPECT_LE(clock.to_system_ns(t + jump + 102'000), t + 103'000);
}

}  // namespace
}  // namespace ferry
