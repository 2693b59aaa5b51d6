// Shared by the fuzz targets: the input as a file, for readers that take a path.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace kvscope::fuzz {

// Writes the input to one scratch file per process (in /dev/shm when there is
// one: no disk traffic) and returns its path. Each call overwrites the last.
inline const std::string& input_file(const uint8_t* data, size_t size, const char* name) {
  static const std::string path = [name] {
    const std::filesystem::path dir = std::filesystem::is_directory("/dev/shm") ? "/dev/shm"
                                                                                : std::filesystem::temp_directory_path();
    return (dir / ("kvscope-fuzz-" + std::to_string(::getpid()) + "-" + name)).string();
  }();
  static const bool cleanup = [] { return std::atexit([] { std::remove(path.c_str()); }) == 0; }();
  (void)cleanup;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace kvscope::fuzz
