// Runs a block of a test on a given number of OpenMP threads.
//
// ctest starts the tests with OMP_NUM_THREADS=1 (tests/CMakeLists.txt): it already
// runs one test per core, and OpenMP threads that spin while another process holds
// their core make a test many times slower. The tests of the parallel paths ask for
// their threads here, so those paths still run.
#pragma once

#include <omp.h>

namespace kvscope::test {

class ScopedThreads {
 public:
  explicit ScopedThreads(int threads) : before_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~ScopedThreads() { omp_set_num_threads(before_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int before_;
};

}  // namespace kvscope::test
