// --device cuda where it cannot run: one clear line and exit code 1, never a
// silent fall-back to the CPU. (With a GPU present, the same command must work.)
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "run_kvscope.h"
#include "test_paths.h"
#include "util/file.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "gpu_devices.h"
#endif

namespace kvscope {
namespace {

using test::ProgramRun;
using test::run_kvscope;

// What `--device cuda` must say on this build and machine, or "" when it must work.
std::string expected_cuda_error(const std::string& prefix) {
#ifdef KVSCOPE_HAVE_CUDA
  std::string why;
  if (cuda::gpu_available(why)) return "";
  return "kvscope: error: " + prefix + ": no CUDA GPU found (" + why + ")\n";
#else
  return "kvscope: error: " + prefix + ": this build has no CUDA backend (no CUDA toolkit was found at configure time)\n";
#endif
}

TEST(DeviceOption, GenerateOnCudaFailsClearlyWithoutAGpu) {
  const ProgramRun r = run_kvscope("generate --device cuda --model " + test::tiny_model("tiny-tied") +
                                   " --prompt hello -n 4 --temperature 0");
  const std::string expected = expected_cuda_error("--device cuda");
  if (expected.empty()) {
    EXPECT_EQ(r.code, 0) << r.output;  // a GPU: the same command runs, and on it
    EXPECT_NE(r.output.find("\ndevice: the model ran on the cuda backend\n"), std::string::npos) << r.output;
  } else {
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(r.output, expected);
  }
}

TEST(DeviceOption, GenerateOnCpuStillWorks) {
  const ProgramRun r = run_kvscope("generate --device cpu --model " + test::tiny_model("tiny-tied") +
                                   " --prompt hello -n 40 --temperature 0 --block-size 4");
  EXPECT_EQ(r.code, 0) << r.output;
  // 3 prompt tokens (BOS first) + 40 new, less the last, which is never run: 42 in
  // ceil(42 / 4) = 11 blocks. Without eviction the summary names no strategy.
  EXPECT_NE(r.output.find("prompt: 3 tokens, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\ncache: no eviction, block size 4: 42 tokens cached in 11 blocks\n"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("device: "), std::string::npos) << r.output;  // said only for another backend
}

TEST(DeviceOption, ServeBenchOnCudaFailsClearlyWithoutAGpu) {
  const ProgramRun r = run_kvscope("serve-bench --device cuda --model " + test::tiny_model("tiny-tied") +
                                   " --requests 3 --prompt-len 12 --output-len 6 --blocks 16 --block-size 4"
                                   " --budget 8 --slack 4 --sinks 2 --recent 2 --repeat 1");
  const std::string expected = expected_cuda_error("--device cuda");
  if (expected.empty()) {
    EXPECT_EQ(r.code, 0) << r.output;  // a GPU: the same command runs
    EXPECT_NE(r.output.find("the model runs on CUDA GPU 0"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("| compact |"), std::string::npos) << r.output;
    // Said from the engines that ran: a silent fall-back to the CPU would fail here.
    EXPECT_NE(r.output.find("\nthe model ran on the cuda backend\n"), std::string::npos) << r.output;
  } else {
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(r.output, expected);
  }
}

// Each run records the backend that ran it; on the CPU the text says nothing of it.
TEST(DeviceOption, ServeBenchRecordsTheBackendOfEveryRun) {
  const std::string json_path = test::binary_path("serve_backend_" + std::to_string(::getpid()) + ".json");
  const ProgramRun r = run_kvscope("serve-bench --device cpu --model " + test::tiny_model("tiny-tied") +
                                   " --requests 2 --prompt-len 12 --output-len 6 --blocks 16 --block-size 4"
                                   " --budget 8 --slack 4 --sinks 2 --recent 2 --repeat 1 --json " + json_path);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("ran on the"), std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(read_file(json_path));
  ASSERT_EQ(j["runs"].size(), 4u);  // none, holes, reuse, compact
  for (const nlohmann::json& run : j["runs"]) EXPECT_EQ(run["backend"], "cpu") << run["strategy"];
  std::remove(json_path.c_str());
}

TEST(DeviceOption, GpuBenchmarksFailClearlyWithoutAGpu) {
  for (const std::string part : {"gpu-attention", "gpu-compaction", "gpu-decode"}) {
    const std::string expected = expected_cuda_error("bench " + part);
    if (expected.empty()) GTEST_SKIP() << "a GPU is present: the benchmarks run (kernels/gpu_check.sh)";
    const ProgramRun r = run_kvscope("bench " + part);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(r.output, expected);
  }
}

#ifdef KVSCOPE_HAVE_CUDA
// Without a GPU a GPU test skips, saying why; where kernels/gpu_check.sh expects one
// (KVSCOPE_EXPECT_GPU=1) it fails instead: there, a run in which every GPU test
// skipped (a device the runtime refuses) once read as passed.
TEST(WithoutAGpu, GpuTestsSkipWithTheReasonOrFailWhereAGpuIsExpected) {
  std::string why;
  if (cuda::gpu_available(why)) GTEST_SKIP() << "this machine has a GPU: its tests run";
  const std::string one_test =
      test::binary_path("kvscope_tests") + " --gtest_filter=GpuKernels.EmbedGathersRowsExactly";
  const ProgramRun skipped = test::run_shell("env -u KVSCOPE_EXPECT_GPU " + one_test + " 2>&1");
  EXPECT_EQ(skipped.code, 0) << skipped.output;
  EXPECT_NE(skipped.output.find("no CUDA GPU: " + why), std::string::npos) << skipped.output;
  EXPECT_NE(skipped.output.find("[  SKIPPED ] 1 test"), std::string::npos) << skipped.output;
  const ProgramRun failed = test::run_shell("KVSCOPE_EXPECT_GPU=1 " + one_test + " 2>&1");
  EXPECT_EQ(failed.code, 1) << failed.output;
  EXPECT_NE(failed.output.find("no CUDA GPU, where KVSCOPE_EXPECT_GPU says there is one: " + why), std::string::npos)
      << failed.output;
}
#endif

}  // namespace
}  // namespace kvscope
