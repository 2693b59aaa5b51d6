// util/max_abs_diff.h: the comparison every "within 1e-4" check in the tests relies on.
#include "util/max_abs_diff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvscope {
namespace {

TEST(MaxAbsDiff, IsTheLargestDistance) {
  EXPECT_EQ(max_abs_diff(std::vector<float>{1, 2, 3}, std::vector<float>{1, 2.5f, 2}), 1.0f);
  EXPECT_EQ(max_abs_diff(std::vector<double>{}, std::vector<double>{}), 0.0);
}

TEST(MaxAbsDiff, ANanOnEitherSideIsInfinitelyFar) {
  // std::max(worst, NaN) returns worst: a plain running max calls a NaN result a match.
  const std::vector<float> good = {1, 2, 3}, bad = {1, NAN, 3};
  EXPECT_EQ(max_abs_diff(good, bad), INFINITY);
  EXPECT_EQ(max_abs_diff(bad, good), INFINITY);
  EXPECT_EQ(max_abs_diff(bad.data(), bad.data(), bad.size()), INFINITY);
}

TEST(MaxAbsDiff, VectorsOfDifferentSizesAreInfinitelyFar) {
  EXPECT_EQ(max_abs_diff(std::vector<float>{1, 2}, std::vector<float>{1, 2, 3}), INFINITY);
}

}  // namespace
}  // namespace kvscope
