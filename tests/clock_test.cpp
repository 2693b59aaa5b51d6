// util/clock.h: a log's progress lines, at most one an interval.
#include "util/clock.h"

#include <gtest/gtest.h>

namespace kvscope {
namespace {

// A line is due once `every` seconds have passed since the last one (or the start):
// not at once, and then not again until the next interval.
TEST(LogProgress, ALineIsDueOncePerInterval) {
  LogProgress now(0);
  EXPECT_TRUE(now.due());
  EXPECT_TRUE(now.due());
  LogProgress slow(1e9);
  EXPECT_FALSE(slow.due());  // a run shorter than the interval prints nothing
  LogProgress tick(0.05);
  EXPECT_FALSE(tick.due());
  const double t0 = now_seconds();
  while (now_seconds() - t0 < 0.06) {
  }
  EXPECT_TRUE(tick.due());
  EXPECT_FALSE(tick.due());  // the interval starts again
}

}  // namespace
}  // namespace kvscope
