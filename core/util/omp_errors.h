// Exceptions out of OpenMP regions. An exception cannot leave a parallel region: the
// program would end in std::terminate ("terminate called without an active exception",
// SIGABRT), not in main's one line "kvscope: error: out of memory". So the body of
// each parallel loop that allocates runs through OmpErrors::run, which keeps the first
// exception; rethrow() throws it again after the region, on the calling thread.
//
//   OmpErrors errors;
//   #pragma omp parallel for
//   for (int i = 0; i < n; ++i) errors.run([&] { body(i); });
//   errors.rethrow();
#pragma once

#include <exception>

namespace kvscope {

class OmpErrors {
 public:
  template <class Body>
  void run(Body&& body) noexcept {
    try {
      body();
    } catch (...) {
#pragma omp critical(kvscope_omp_errors)
      if (!first_) first_ = std::current_exception();
    }
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::exception_ptr first_;  // the first body to throw; the others' are dropped
};

}  // namespace kvscope
