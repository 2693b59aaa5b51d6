// Small helpers shared by the tutorials' programs: running a chapter, finding the
// repository's files, and printing numbers the way the chapters quote them (with
// util/format.h's commas and percent).
#pragma once

#include <cinttypes>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "util/file.h"
#include "util/format.h"  // commas, percent: as the app and the command line print them

namespace kvscope::tutorial {

// Every chapter's main: runs the chapter, which takes no arguments. Given one
// (--help, say), the program says which chapter it prints and runs nothing; an
// error (a file of the repository missing, say) is one line and exit code 1.
inline int run_chapter(int argc, char** argv, void (*chapter)()) {
  const std::string name = std::filesystem::path(argv[0]).filename().string();  // e.g. 03-evict-87-reclaim-12
  const std::string text = "tutorials/" + name + "/README.md";
  // The exit code once standard output has what was printed: the numbers (or the help)
  // were the point, so a write that failed there (a full disk, say) is an error.
  const auto written = [&name] {
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return 0;
    std::fprintf(stderr, "%s: error: standard output: write failed (disk full?)\n", name.c_str());
    return 1;
  };
  if (argc > 1) {
    const std::string arg = argv[1];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s prints the numbers that %s quotes; it takes no arguments\n", argv[0], text.c_str());
      return written();
    }
    std::fprintf(stderr, "%s: takes no arguments, got '%s' (it prints the numbers that %s quotes)\n", name.c_str(),
                 arg.c_str(), text.c_str());
    return 2;
  }
  try {
    chapter();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
  return written();
}

// A file of the repository, by its path from the repository root. The programs
// are run from the root (as the chapters show), and print this relative path;
// started from elsewhere they find the file through the source directory.
inline std::string repo_path(const std::string& relative) {
#ifdef KVSCOPE_SOURCE_DIR
  if (!file_exists(relative)) return std::string(KVSCOPE_SOURCE_DIR) + "/" + relative;
#endif
  return relative;
}

// printf into a std::string.
template <class... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// Bytes in decimal units (1 GB = 1e9 bytes, the unit GPUs are sold in) with fixed
// decimals: "24.00 GB", "298.0 MB". Not util/format.h's three significant digits
// ("24.0 GB", "298 MB"): the chapters print sums, 24.00 - 16.38 - 1.00 = 6.62 GB,
// and every term must carry the digits the total has.
inline std::string table_bytes(double b) {
  if (b >= 1e9) return format("%.2f GB", b / 1e9);
  if (b >= 1e6) return format("%.1f MB", b / 1e6);
  if (b >= 1e3) return format("%.1f kB", b / 1e3);
  return format("%.0f B", b);
}

}  // namespace kvscope::tutorial
