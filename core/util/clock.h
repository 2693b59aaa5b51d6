// Wall-clock time for measuring how long something took: seconds on the monotonic
// clock (steady_clock), whose zero means nothing; only differences do.
//
//   const double t0 = now_seconds();
//   ...
//   const double took = now_seconds() - t0;   // seconds
#pragma once

#include <chrono>

namespace kvscope {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace kvscope
