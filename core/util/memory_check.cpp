#include "util/memory_check.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

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

size_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  unsigned long long kilobytes = 0;
  for (std::string line; std::getline(meminfo, line);)
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kilobytes) == 1) return size_t(kilobytes) * 1024;
  return physical_memory_bytes();
}

void check_fits_in_memory(size_t bytes, const std::string& what) {
  const size_t available = available_memory_bytes();
  if (available == 0 || bytes <= available) return;
  throw Error("not enough memory for " + what + ": " + gigabytes(bytes) + " needed, " + gigabytes(available) +
              " available (of " + gigabytes(physical_memory_bytes()) + ")");
}

}  // namespace kvscope
