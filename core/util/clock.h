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

// When a long run's progress goes to a log, not a terminal: a plain line at most every
// `every` seconds (a line rewritten in place would pile up there; a run shorter than
// that prints none).
//
//   LogProgress log;
//   ... if (log.due()) std::fprintf(stderr, "simulate: 40%%\n");
class LogProgress {
 public:
  explicit LogProgress(double every = 10) : every_(every), last_(now_seconds()) {}
  bool due() {
    if (now_seconds() - last_ < every_) return false;
    last_ = now_seconds();
    return true;
  }

 private:
  double every_;  // seconds between lines
  double last_;   // when the last line (or the run) began
};

}  // namespace kvscope
