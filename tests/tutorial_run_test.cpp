// The tutorials' programs share one main (tutorials/tutorial.h: run_chapter): the
// chapter takes no arguments, --help says which chapter it prints without running
// it, and an error is one line and exit code 1 rather than an uncaught exception.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tutorial.h"
#include "util/error.h"

namespace kvscope::tutorial {
namespace {

int runs = 0;
void counts_its_runs() { ++runs; }
void cannot_find_its_file() { throw Error("assets/model/config.json: cannot open"); }

struct Ran {
  int code;
  std::string out, err;
};

Ran run(std::vector<std::string> args, void (*chapter)()) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int code = run_chapter(int(argv.size()), argv.data(), chapter);
  const std::string err = testing::internal::GetCapturedStderr();
  return {code, testing::internal::GetCapturedStdout(), err};
}

TEST(TutorialRun, TheChapterRunsWithNoArguments) {
  runs = 0;
  const Ran r = run({"build/tutorials/03-evict-87-reclaim-12"}, counts_its_runs);
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(r.err, "");
}

TEST(TutorialRun, HelpSaysWhichChapterAndRunsNothing) {
  runs = 0;
  const Ran r = run({"build/tutorials/03-evict-87-reclaim-12", "--help"}, counts_its_runs);
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(r.out, "build/tutorials/03-evict-87-reclaim-12 prints the numbers that "
                   "tutorials/03-evict-87-reclaim-12/README.md quotes; it takes no arguments\n");
}

TEST(TutorialRun, AnArgumentIsRefused) {
  runs = 0;
  const Ran r = run({"build/tutorials/07-compaction", "--seed", "2"}, counts_its_runs);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(r.err, "07-compaction: takes no arguments, got '--seed' (it prints the numbers that "
                   "tutorials/07-compaction/README.md quotes)\n");
}

TEST(TutorialRun, AnErrorIsOneLineAndExitCodeOne) {
  const Ran r = run({"build/tutorials/06-scoring-without-scores"}, cannot_find_its_file);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "06-scoring-without-scores: error: assets/model/config.json: cannot open\n");
}

}  // namespace
}  // namespace kvscope::tutorial
