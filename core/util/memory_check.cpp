#include "util/memory_check.h"

#include <unistd.h>

#include <cstdio>

#include "util/error.h"

namespace kvscope {

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
}

void check_fits_in_memory(size_t bytes, const std::string& what) {
  const size_t have = physical_memory_bytes();
  if (have == 0 || bytes <= have) return;
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "%.2f GB needed, this machine has %.2f GB", double(bytes) / 1e9,
                double(have) / 1e9);
  throw Error("not enough memory for " + what + ": " + numbers);
}

}  // namespace kvscope
