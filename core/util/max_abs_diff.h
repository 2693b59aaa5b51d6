// The largest |a[i] - b[i]|: how far apart two results are, for tests, benchmarks
// and tutorials. A NaN on either side counts as infinitely far: std::max(worst, NaN)
// keeps `worst`, so a plain running max would report a NaN result as a perfect match.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace kvscope {

template <class T>
T max_abs_diff(const T* a, const T* b, size_t n) {
  T worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const T d = std::abs(a[i] - b[i]);
    if (std::isnan(d)) return std::numeric_limits<T>::infinity();
    if (d > worst) worst = d;
  }
  return worst;
}

// Vectors of different sizes are infinitely far apart too.
template <class T>
T max_abs_diff(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return std::numeric_limits<T>::infinity();
  return max_abs_diff(a.data(), b.data(), a.size());
}

}  // namespace kvscope
