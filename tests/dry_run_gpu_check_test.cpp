// kernels/gpu_check.sh is the one run a lent GPU machine gets: minutes of device
// time, rarely, with no second try. So it is dry-run here, with stand-ins for its
// two programs (shell scripts that print their arguments and sleep): it must write
// every step's command to the report, keep inside its time budget by listing what
// does not fit as skipped, end with a summary of what failed or was skipped, and
// exit 0 only if nothing failed. What the real programs print is the GPU
// tests' and benchmarks' business. (Neither the suite's name nor the file's starts
// with "gpu": the script runs the GPU tests as Gpu*, and the CPU stand-in builds
// tests/gpu_*_test.cpp; neither should run this.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "run_kvscope.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

struct DryRun {
  test::ProgramRun run;  // the script's exit code and terminal output
  std::string report;    // $OUT/gpu-results.md
};

// gpu_check.sh with BUDGET=budget and stub kvscope, kvscope_tests and ldd; the first two take
// `seconds`; the stub kvscope_tests runs `tests_also` (shell) after that. With
// `copied`, the script runs from a copy outside any git checkout, as on the GPU
// machine, beside a build/lib/COMMIT as --prepare writes it; with `recorded`, that file
// says this commit.
DryRun dry_run(int budget, int seconds, const std::string& tests_also = "", bool copied = false,
               std::string recorded = "") {
  const fs::path dir = fs::temp_directory_path() / ("kvscope-gpu-check-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(budget));
  fs::remove_all(dir);
  fs::create_directories(dir / "build");
  fs::create_directories(dir / "out");
  for (const char* name : {"kvscope", "kvscope_tests"}) {
    std::ofstream(dir / "build" / name) << "#!/bin/sh\necho \"stub " << name << " $*\"\nsleep " << seconds << "\n"
                                        << (name == std::string("kvscope_tests") ? tests_also : "") << "\n";
    fs::permissions(dir / "build" / name, fs::perms::owner_all);
  }
  // ldd of a shell script fails ("not a dynamic executable"), as the real programs' does not.
  fs::create_directories(dir / "bin");
  std::ofstream(dir / "bin" / "ldd") << "#!/bin/sh\necho \"stub ldd $*\"\n";
  fs::permissions(dir / "bin" / "ldd", fs::perms::owner_all);
  std::string script = test::source_path("kernels/gpu_check.sh");
  if (copied) {
    fs::create_directories(dir / "tree" / "kernels");
    fs::create_directories(dir / "build" / "lib");
    fs::copy_file(script, dir / "tree" / "kernels" / "gpu_check.sh");
    script = (dir / "tree" / "kernels" / "gpu_check.sh").string();
    if (recorded.empty()) recorded = "feedbee";
  }
  DryRun r;
  if (!recorded.empty()) {
    fs::create_directories(dir / "build" / "lib");
    std::ofstream(dir / "build" / "lib" / "COMMIT") << recorded << "\n";
  }
  r.run = test::run_command("PATH='" + (dir / "bin").string() + "':\"$PATH\" OUT='" + (dir / "out").string() +
                            "' BUILD='" + (dir / "build").string() + "' BUDGET=" + std::to_string(budget) + " bash '" +
                            script + "'");
  std::ifstream in(dir / "out" / "gpu-results.md");
  std::stringstream report;
  report << in.rdbuf();
  r.report = report.str();
  fs::remove_all(dir);
  return r;
}

// The report's line that contains both a and b, or "".
std::string line_with(const std::string& text, const std::string& a, const std::string& b) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.find(a) != std::string::npos && line.find(b) != std::string::npos) return line;
  return "";
}

TEST(DryRunOfGpuCheck, DryRunWritesEveryStepToTheReport) {
  const DryRun r = dry_run(540, 0);
  ASSERT_EQ(r.run.code, 0) << r.run.output;
  for (const char* expected :
       {"# kvscope on a CUDA GPU", "- date: ", "- GPU (nvidia-smi", "- commit: ", "stub kvscope devices",
        "stub kvscope_tests --gtest_filter=Gpu*:DeviceOption*", "stub kvscope bench gpu-attention",
        "stub kvscope bench gpu-compaction", "stub kvscope bench gpu-decode", "stub kvscope serve-bench --device cuda",
        "## Sanitizers", "## Kernel profiles", "## Summary\n\nEvery step that ran exited 0.\n", "(the whole run: "})
    EXPECT_NE(r.report.find(expected), std::string::npos) << "not in the report: " << expected << "\n" << r.report;
  EXPECT_EQ(r.report.find("(skipped"), std::string::npos) << r.report;
  EXPECT_EQ(r.report.find("one process each"), std::string::npos) << "nothing failed, nothing to rerun\n" << r.report;
}

TEST(DryRunOfGpuCheck, InACopyWithoutGitTheCommitIsTheOnePrepareRecorded) {
  // The device tool sends the working tree, not .git: the report's commit must
  // still say which code ran.
  const DryRun r = dry_run(540, 0, "", /*copied=*/true);
  ASSERT_EQ(r.run.code, 0) << r.run.output;
  EXPECT_NE(r.report.find("- commit: feedbee (recorded by --prepare; this copy has no .git)"), std::string::npos)
      << r.report;
}

TEST(DryRunOfGpuCheck, ProgramsBuiltFromAnotherCommitThanTheTreeAreSaidSo) {
  // Run from this checkout (git), with programs --prepare built at another commit: the
  // report's results are those programs', and the Build section says which commit that is.
  const DryRun r = dry_run(540, 0, "", /*copied=*/false, "0000000");
  ASSERT_EQ(r.run.code, 0) << r.run.output;
  EXPECT_NE(line_with(r.report, "from commit 0000000,", "WARNING: the programs were built from 0000000, this tree"),
            "")
      << r.report;
}

TEST(DryRunOfGpuCheck, FailedGpuTestsAreRerunAloneWithSynchronousLaunches) {
  // The whole GPU test run fails two tests (one of them parameterised): each is then
  // run alone with CUDA_LAUNCH_BLOCKING=1, and the run goes on to the benchmarks.
  const DryRun r = dry_run(540, 0,
                           "case \"$*\" in *'Gpu*'*)\n"
                           "  echo '[  FAILED  ] GpuKernels.RmsNormMatchesTheCpu (3 ms)'\n"
                           "  echo '[  FAILED  ] GpuModel/Logits.MatchTheCpu/2, where GetParam() = 2 (5 ms)'\n"
                           "  echo '[ RUN      ] GpuServe.SkippedLast'\n"
                           "  echo '[  SKIPPED ] GpuServe.SkippedLast (0 ms)'\n"
                           "  echo '[  FAILED  ] 2 tests, listed below:'\n"
                           "  echo '[  FAILED  ] GpuKernels.RmsNormMatchesTheCpu'\n"
                           "  echo '[  FAILED  ] GpuModel/Logits.MatchTheCpu/2, where GetParam() = 2'\n"
                           "  exit 1;;\n"
                           "esac");
  EXPECT_EQ(r.run.code, 1) << "a step failed\n" << r.run.output;
  EXPECT_NE(r.report.find("## Failed GPU tests, one process each"), std::string::npos) << r.report;
  EXPECT_NE(line_with(r.report, "$ env CUDA_LAUNCH_BLOCKING=1 ", "--gtest_filter=GpuKernels.RmsNormMatchesTheCpu"), "")
      << r.report;
  EXPECT_NE(line_with(r.report, "$ env CUDA_LAUNCH_BLOCKING=1 ", "--gtest_filter=GpuModel/Logits.MatchTheCpu/2"), "")
      << r.report;
  EXPECT_EQ(line_with(r.report, "CUDA_LAUNCH_BLOCKING", "--gtest_filter=2"), "") << r.report;
  EXPECT_EQ(line_with(r.report, "$ env CUDA_LAUNCH_BLOCKING=1 ", "MatchTheCpu/2,"), "") << "the comma, in a filter\n"
                                                                                     << r.report;
  EXPECT_EQ(r.report.find("stopped in"), std::string::npos) << "a skipped test is not a crash\n" << r.report;
  EXPECT_NE(r.report.find("stub kvscope bench gpu-decode"), std::string::npos) << r.report;
  // The summary names the failed step (the reruns passed), with its exit code.
  EXPECT_NE(r.report.find("## Summary\n\nSteps that failed (1):\n- "), std::string::npos) << r.report;
  EXPECT_NE(line_with(r.report, "- ", "kvscope_tests --gtest_filter=Gpu*:DeviceOption* (exit code 1)"), "") << r.report;
}

TEST(DryRunOfGpuCheck, ATestProgramThatCrashesHasItsLastTestNamedAndRerun) {
  // A segfault prints no FAILED line: the test it was in (started, never finished) is
  // named, rerun alone, and the signal is in the summary.
  const DryRun r = dry_run(540, 0,
                           "case \"$*\" in *'Gpu*'*)\n"
                           "  echo '[ RUN      ] GpuKernels.RmsNormMatchesTheCpu'\n"
                           "  echo '[       OK ] GpuKernels.RmsNormMatchesTheCpu (3 ms)'\n"
                           "  echo '[ RUN      ] GpuAttention.PagedDecodeMatchesCpu'\n"
                           "  kill -SEGV $$;;\n"
                           "esac");
  EXPECT_EQ(r.run.code, 1) << r.run.output;
  EXPECT_NE(r.report.find("## The GPU tests stopped in GpuAttention.PagedDecodeMatchesCpu"), std::string::npos)
      << r.report;
  EXPECT_NE(line_with(r.report, "$ env CUDA_LAUNCH_BLOCKING=1 ", "--gtest_filter=GpuAttention.PagedDecodeMatchesCpu"),
            "")
      << r.report;
  EXPECT_EQ(line_with(r.report, "$ env CUDA_LAUNCH_BLOCKING=1 ", "RmsNorm"), "") << "it passed\n" << r.report;
  EXPECT_NE(line_with(r.report, "- ", "(exit code 139: killed by signal 11 SIGSEGV)"), "") << r.report;
}

TEST(DryRunOfGpuCheck, StepsPastTheBudgetAreListedAsSkipped) {
  // Each stub takes 2 s. With a 12 s budget the first step runs, and once under 10 s
  // is left the rest are listed as skipped instead of running past the device call.
  const DryRun r = dry_run(12, 2);
  ASSERT_EQ(r.run.code, 0) << r.run.output;
  EXPECT_NE(r.report.find("stub kvscope devices"), std::string::npos) << r.report;
  EXPECT_EQ(r.report.find("stub kvscope serve-bench"), std::string::npos) << r.report;
  EXPECT_NE(line_with(r.report, "(skipped, ", "kvscope serve-bench --device cuda"), "") << r.report;
  EXPECT_NE(line_with(r.report, "of the 12 s budget left)", "kvscope bench gpu-decode"), "") << r.report;
  EXPECT_NE(r.report.find("Steps skipped, with no budget left ("), std::string::npos) << r.report;
  EXPECT_NE(line_with(r.report, "- ", "kvscope serve-bench --device cuda"), "") << r.report;
}

// A typo of --prepare once ran the whole check on the development machine and
// wrote a report of a machine without a GPU; now it is refused before anything runs.
TEST(DryRunOfGpuCheck, AnArgumentOtherThanPrepareIsRefused) {
  const std::string script = test::source_path("kernels/gpu_check.sh");
  for (const std::string args : {"--perpare", "--prepare extra", "now"}) {
    const fs::path out = fs::temp_directory_path() / ("kvscope-gpu-check-args-" + std::to_string(::getpid()));
    fs::remove_all(out);
    fs::create_directories(out);
    const test::ProgramRun r = test::run_command("OUT='" + out.string() + "' bash '" + script + "' " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_EQ(r.output, "gpu_check.sh: expects no argument (the run on the GPU machine) or --prepare (the build here), "
                        "got '" + args + "'\n")
        << args;
    EXPECT_FALSE(fs::exists(out / "gpu-results.md")) << args;
    fs::remove_all(out);
  }
}

}  // namespace
}  // namespace kvscope
