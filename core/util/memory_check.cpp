#include "util/memory_check.h"

#include <unistd.h>

#include <cstdio>

#include "util/error.h"

namespace kvscope {

std::string gigabytes(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GB", double(bytes) / 1e9);
  return s;
}

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
}

void check_fits_in_memory(size_t bytes, const std::string& what) {
  const size_t have = physical_memory_bytes();
  if (have == 0 || bytes <= have) return;
  throw Error("not enough memory for " + what + ": " + gigabytes(bytes) + " needed, this machine has " +
              gigabytes(have));
}

}  // namespace kvscope
