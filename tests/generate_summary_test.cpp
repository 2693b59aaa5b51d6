// The lines `kvscope generate` ends with: what eviction did under each memory
// strategy. Only compaction moves K/V; the other two say why nothing moved
// rather than print "compaction moved 0.00 MB" under a strategy that never compacts.
#include <gtest/gtest.h>

#include <string>

#include "run_kvscope.h"

namespace kvscope {
namespace {

using test::ProgramRun;
using test::run_kvscope;

ProgramRun generate_with(const std::string& strategy) {
  return run_kvscope("generate --prompt hi -n 120 --temperature 0 --budget 64 --slack 16 --strategy " + strategy);
}

TEST(GenerateSummary, CompactionSaysHowMuchItMoved) {
  const ProgramRun r = generate_with("compact");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\n  compaction moved "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("nothing moved"), std::string::npos) << r.output;
}

TEST(GenerateSummary, HolesAndReuseSayWhyNothingMoved) {
  const ProgramRun holes = generate_with("holes");
  ASSERT_EQ(holes.code, 0) << holes.output;
  EXPECT_NE(holes.output.find(", holes, budget 64 (+16 slack), "), std::string::npos) << holes.output;
  EXPECT_NE(holes.output.find("\n  nothing moved: under holes the survivors stay in their slots\n"), std::string::npos)
      << holes.output;
  EXPECT_EQ(holes.output.find("compaction moved"), std::string::npos) << holes.output;

  const ProgramRun reuse = generate_with("reuse");
  ASSERT_EQ(reuse.code, 0) << reuse.output;
  EXPECT_NE(reuse.output.find("\n  nothing moved: under reuse new tokens fill the holes\n"), std::string::npos)
      << reuse.output;
  EXPECT_EQ(reuse.output.find("compaction moved"), std::string::npos) << reuse.output;
}

}  // namespace
}  // namespace kvscope
