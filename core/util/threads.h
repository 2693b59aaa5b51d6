// How many OpenMP threads kvscope starts, and the check of what OpenMP starts by itself.
#pragma once

#include <string>

namespace kvscope {

// The most threads kvscope starts: a team of 100,000 crashed inside libgomp (SIGSEGV
// creating it); 1,024 runs, slowly.
constexpr int kMaxThreads = 1024;

// kvscope::Error when `threads` is over kMaxThreads. Returns a warning when it is more
// than this machine's hardware threads (the extra ones take turns), else "". `named`
// is how the user asked for them: "--threads 8", "OMP_NUM_THREADS=8".
std::string check_thread_count(int threads, const std::string& named);

// What a parallel region starts without --threads: OMP_NUM_THREADS when it is set,
// else every hardware thread. check_thread_count for OMP_NUM_THREADS, its refusal
// ending in `way_out` ("lower it or unset it"); "" when unset. Both programs call it
// first, so no command meets a team libgomp cannot create.
std::string check_openmp_default(const std::string& way_out);

}  // namespace kvscope
