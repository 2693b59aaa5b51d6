// A scratch folder of the running test's own, under testing::TempDir(): ctest runs
// tests side by side, each in its own process, and two that wrote "a.trace" in the
// one shared folder deleted each other's files (38 failures in 300 paired runs).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace kvscope::test {

// testing::TempDir() + "Suite.Name/", created; file names in it stay as the test wants
// them (a trace's name is its view's title).
inline std::string own_temp_dir() {
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = testing::TempDir() + info->test_suite_name() + "." + info->name() + "/";
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace kvscope::test
