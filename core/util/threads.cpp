#include "util/threads.h"

#include <omp.h>

#include <cstdlib>

#include "util/error.h"

namespace kvscope {

std::string check_thread_count(int threads, const std::string& named) {
  const int cores = omp_get_num_procs();  // hardware threads this process may use
  if (threads > kMaxThreads)
    throw Error(named + " is more than " + std::to_string(kMaxThreads) + ", the most kvscope starts (there are " +
                std::to_string(cores) + " hardware threads here)");
  if (threads > cores)
    return named + " is more than the " + std::to_string(cores) +
           " hardware threads here: the extra threads take turns and slow the run";
  return "";
}

std::string check_openmp_default(const std::string& way_out) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (!env || !*env) return "";
  // Refused: named with the way out (the limit check's message, and what to do).
  try {
    return check_thread_count(omp_get_max_threads(), "OMP_NUM_THREADS=" + std::string(env));
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + ": " + way_out);
  }
}

}  // namespace kvscope
