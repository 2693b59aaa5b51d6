// The charts' axes (viz/axis.h): round labels, and one axis for two series alike.
#include <gtest/gtest.h>

#include <cmath>

#include "axis.h"

namespace kvscope::viz {
namespace {

// h2o-model's memory chart once ended its axes 5% above each peak: 0, 181 kB,
// 361 kB, 542 kB, 723 kB on the left and 0 ... 759 kB on the right.
TEST(VizAxis, TopsAreRoundAndAtLeastThePeak) {
  EXPECT_DOUBLE_EQ(axis_top(723e3), 800e3);  // steps of 200 kB
  EXPECT_DOUBLE_EQ(axis_top(3.67e9), 4e9);   // of 1 GB
  EXPECT_DOUBLE_EQ(axis_top(459e6), 600e6);  // of 150 MB
  EXPECT_DOUBLE_EQ(axis_top(800e3), 800e3);  // a peak on a round top stays
  EXPECT_DOUBLE_EQ(axis_top(801e3), 1e6);    // of 250 kB
  for (double peak = 1; peak < 1e13; peak *= 1.37) {
    const double top = axis_top(peak);
    EXPECT_GE(top, peak);
    EXPECT_LE(top, 1.5 * peak * (1 + 1e-9)) << peak;
    const double step = top / 4, ten = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    bool round = false;
    for (double m : {1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0}) round |= std::fabs(step / ten - m) < 1e-9;
    EXPECT_TRUE(round) << peak << " -> a step of " << step;
  }
}

TEST(VizAxis, TwoSeriesShareAnAxisWhenNeitherIsMoreThanTwiceTheOther) {
  EXPECT_TRUE(share_axis(723e3, 759e3));   // h2o-model: memory and bytes moved
  EXPECT_FALSE(share_axis(3.67e9, 459e6)); // blog-16k-random: 8x apart
  EXPECT_TRUE(share_axis(1, 2));
  EXPECT_FALSE(share_axis(1, 2.01));
  EXPECT_FALSE(share_axis(1, 0));          // nothing moved: no second series
}

}  // namespace
}  // namespace kvscope::viz
