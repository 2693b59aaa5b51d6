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

std::string check_openmp_default() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (!env || !*env) return "";
  return check_thread_count(omp_get_max_threads(), "OMP_NUM_THREADS=" + std::string(env));
}

}  // namespace kvscope
