// One of a thing reads in the singular: "1 token cached in 1 block", never "1
// tokens ... 1 blocks". The counts come from the user's flags, so 1 is a count
// the program meets (util/format.h: plural()).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_kvscope.h"
#include "safetensors_parts.h"
#include "util/file.h"

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

// (A one-token run evicts its token: with it kept, nothing would be evicted, and that is
// refused. The sink is a second run's.)
TEST(Singular, SimulateOfOneTokenWithOneSink) {
  const ProgramRun r = run_kvscope("simulate --tokens 1 --block-size 1 --evict 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("kvscope simulate: 1 token in blocks of 1: a full cache takes 1 block, "), std::string::npos)
      << r.output;
  const ProgramRun sink = run_kvscope("simulate --tokens 2 --block-size 1 --evict 0.5 --sinks 1");
  ASSERT_EQ(sink.code, 0) << sink.output;
  EXPECT_NE(sink.output.find("\nprotected: 1 sink, 0 recent\n"), std::string::npos) << sink.output;
}

TEST(Singular, ServeBenchOfOneRequestForOneNewToken) {
  const ProgramRun r = run_kvscope("serve-bench --requests 1 --prompt-len 1 --output-len 1 --repeat 1 --strategies none");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("assets/model, 1 request of 1 prompt + 1 new token (prompts: "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("over the wall time of the run (one run of each strategy, after an untimed warm-up step); "),
            std::string::npos)
      << r.output;  // once "the median of 1 run"
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

// A model of one layer and one KV head (multi-query attention), as a user's
// config.json may give: the commands that read only its shape say so in the
// singular, and a small model's size is not "0M parameters" or "0 KiB per token".
class OneLayerOneKvHead : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(config_) << R"({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 160,
      "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
      "vocab_size": 384, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
      "tie_word_embeddings": true})";
  }
  void TearDown() override { std::remove(config_.c_str()); }
  const std::string config_ = test::binary_path("one_layer_one_kv_head_" + std::to_string(::getpid()) + ".json");
};

TEST_F(OneLayerOneKvHead, BenchAttention) {
  const ProgramRun r = run_kvscope("bench attention --contexts 64 --queries 4 --repeats 1 --config " + config_);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" (4 query heads, 1 KV head, head_dim 32), f32\n"), std::string::npos) << r.output;
}

TEST_F(OneLayerOneKvHead, BenchCompaction) {
  const ProgramRun r = run_kvscope("bench compaction --tokens 64 --repeats 1 --config " + config_);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" (1 layer, kv_dim 32, f32: 0.25 KiB per token)\n"), std::string::npos) << r.output;
}

TEST_F(OneLayerOneKvHead, ServeBench) {
  const ProgramRun r = run_kvscope("serve-bench --requests 1 --prompt-len 8 --output-len 4 --repeat 1 --strategies none"
                                   " --config " + config_);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("'s shape (1 layer)...\n"), std::string::npos) << r.output;
  // 384 x 64 embeddings + one layer (q 128 x 64, k and v 32 x 64, o 64 x 128, MLP 3 x 160 x 64, norms 192)
  // + the final norm's 64 = 76,032
  EXPECT_NE(r.output.find(" (1 layer, 0.08M parameters, random bf16 weights), "), std::string::npos) << r.output;
}

// The same, as a checkpoint: tests/models/tiny-tied cut to its first layer (the
// config says 1 layer; layer 1's tensors leave the file, the others keep their bytes).
class OneLayerCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    fs::remove_all(dir_);
    fs::copy(test::tiny_model("tiny-tied"), dir_);
    nlohmann::json config = nlohmann::json::parse(read_file(dir_ + "/config.json"));
    config["num_hidden_layers"] = 1;
    std::ofstream(dir_ + "/config.json", std::ios::trunc) << config.dump(2);

    const test::SafetensorsParts two = test::split_safetensors(read_file(dir_ + "/model.safetensors"));
    test::SafetensorsParts one;
    for (const auto& [name, tensor] : two.header.items()) {
      if (name.rfind("model.layers.1.", 0) == 0) continue;
      one.header[name] = tensor;
      if (name == "__metadata__") continue;
      const size_t begin = tensor["data_offsets"][0], end = tensor["data_offsets"][1];
      one.header[name]["data_offsets"] = {one.data.size(), one.data.size() + (end - begin)};
      one.data += two.data.substr(begin, end - begin);
    }
    std::ofstream(dir_ + "/model.safetensors", std::ios::binary | std::ios::trunc)
        << test::join_safetensors(one.header, one.data);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  const std::string dir_ = test::binary_path("one_layer_model_" + std::to_string(::getpid()));
};

TEST_F(OneLayerCheckpoint, Calibrate) {
  const std::string out = dir_ + "/calibration.json";
  const ProgramRun r = run_kvscope("calibrate --model " + dir_ + " --text " +
                                   test::source_path("assets/model/heldout.txt") + " --max-tokens 32 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("calibration.json: 1 layer x 4 query heads x 16 bands\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n| 0 | "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\n| 1 | "), std::string::npos) << r.output;  // the table has the one layer only
}

}  // namespace
}  // namespace kvscope
