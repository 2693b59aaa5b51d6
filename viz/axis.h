// The charts' y axes: where they end, so that their labels are round numbers.
// No drawing here (draw_charts.cpp draws), so the rule is tested without a window.
#pragma once

#include <cmath>

namespace kvscope::viz {

// The top of an axis over [0, peak] drawn in 4 steps: the least 4 x step >= peak
// with step = 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 x 10^k, so the labels read 0, 200 kB,
// 400 kB, 600 kB, 800 kB for a peak of 723 kB (not 0, 181 kB, 361 kB, ...), and the
// top is at most 1.5 x the peak. peak > 0.
inline double axis_top(double peak) {
  const double raw = peak / 4;
  const double ten = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0})
    if (m * ten >= raw * (1 - 1e-12)) return 4 * m * ten;
  return 40 * ten;
}

// Whether two series in one unit share one axis: when neither peak is more than
// twice the other, each still fills at least half the height, and a second axis
// of about the same range would only invite reading a line against the wrong one.
inline bool share_axis(double peak_a, double peak_b) {
  return peak_a > 0 && peak_b > 0 && std::fmax(peak_a, peak_b) <= 2 * std::fmin(peak_a, peak_b);
}

}  // namespace kvscope::viz
