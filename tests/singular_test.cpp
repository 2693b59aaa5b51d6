// One of a thing reads in the singular: "1 token cached in 1 block", never "1
// tokens ... 1 blocks". The counts come from the user's flags, so 1 is a count
// the program meets (util/format.h: plural()).
#include <gtest/gtest.h>

#include <string>

#include "run_kvscope.h"

namespace kvscope {
namespace {

using test::ProgramRun;
using test::run_kvscope;

TEST(Singular, GenerateOfOneTokenCachesItInOneBlock) {
  // The bundled model's tokenizer makes "x" one token, and no BOS is added.
  const ProgramRun r = run_kvscope("generate --prompt x -n 0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\nprompt: 1 token, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| decode: 0 tokens, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\ncache: no eviction, block size 16: 1 token cached in 1 block\n"), std::string::npos)
      << r.output;
}

TEST(Singular, SimulateOfOneTokenWithOneSink) {
  const ProgramRun r = run_kvscope("simulate --tokens 1 --block-size 1 --evict 0 --sinks 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("kvscope simulate: 1 token in blocks of 1: a full cache takes 1 block, "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\nprotected: 1 sink, 0 recent\n"), std::string::npos) << r.output;
}

TEST(Singular, ServeBenchOfOneRequestForOneNewToken) {
  const ProgramRun r = run_kvscope("serve-bench --requests 1 --prompt-len 1 --output-len 1 --repeat 1 --strategies none");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("assets/model, 1 request of 1 prompt + 1 new token (prompts: "),
            std::string::npos)
      << r.output;
}

TEST(Singular, TheLawForBlocksOfOneSlotSpeaksOfItsOneToken) {
  const ProgramRun r = run_kvscope("simulate --tokens 64 --block-size 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("expected (0.875)^1 = 87.5% of blocks freed without compaction: a block returns to the "
                          "pool only\nwhen its one token was evicted, with probability 0.875.\n"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("all 1 of"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvscope
