// The KV-cache memory calculator: the library's numbers (checked against hand
// computations from the real Qwen3 configs) and the `kvscope memory` program.
#include "model/memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "model/config.h"
#include "run_kvscope.h"
#include "util/error.h"

namespace kvscope {
namespace {

ModelConfig qwen3_06b() { return load_config_file(test::source_path("assets/configs/qwen3-0.6b-config.json")); }
ModelConfig qwen3_32b() { return load_config_file(test::source_path("assets/configs/qwen3-32b-config.json")); }

// Qwen3-0.6B by hand, from the numbers of its config.json: hidden 1024, 16 query
// heads and 8 KV heads of 128 dims (q 2048 wide, k/v 1024 wide), MLP 3072, 28 layers,
// vocab 151936, embeddings tied to lm_head (counted once).
TEST(Memory, ParameterCountQwen3_06B_ByHand) {
  const int64_t attention = 1024LL * 2048 + 1024LL * 1024 + 1024LL * 1024 + 2048LL * 1024;  // q, k, v, o
  const int64_t mlp = 3LL * 1024 * 3072;                                                  // gate, up, down
  const int64_t norms = 1024 + 1024 + 128 + 128;  // input and post-attention RMSNorm, q_norm, k_norm
  const int64_t per_layer = attention + mlp + norms;
  EXPECT_EQ(per_layer, 15730944);
  const int64_t total = 151936LL * 1024 + 28 * per_layer + 1024;  // embeddings, layers, final norm
  EXPECT_EQ(total, 596049920);
  EXPECT_EQ(qwen3_06b().parameter_count(), 596049920);
}

// Qwen3-32B by hand: hidden 5120, q 64x128 = 8192 wide, k/v 8x128 = 1024 wide,
// MLP 25600, 64 layers, untied embeddings and lm_head.
TEST(Memory, ParameterCountQwen3_32B_ByHand) {
  const int64_t attention = 5120LL * 8192 + 2 * 5120LL * 1024 + 8192LL * 5120;
  const int64_t per_layer = attention + 3LL * 5120 * 25600 + 2 * 5120 + 2 * 128;
  const int64_t total = 2 * 151936LL * 5120 + 64 * per_layer + 5120;
  EXPECT_EQ(total, 32762123264);
  EXPECT_EQ(qwen3_32b().parameter_count(), total);
}

TEST(Memory, KvBytesPerTokenQwen3_06B) {
  const ModelConfig c = qwen3_06b();
  EXPECT_EQ(kv_bytes_per_token(c, 16), 2 * 28 * 8 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(c, 16), 114688);  // 112 KiB
  EXPECT_EQ(kv_bytes_per_token(c, 16), 112 * 1024);
  EXPECT_EQ(kv_bytes_per_token(c, 32), 229376);
  EXPECT_EQ(kv_bytes_per_token(c, 8), 57344);
  EXPECT_EQ(kv_tokens_per_gb(c, 16), 8719);  // 1e9 / 114,688, rounded down
}

TEST(Memory, KvBytesPerTokenQwen3_32B) {
  const ModelConfig c = qwen3_32b();
  EXPECT_EQ(kv_bytes_per_token(c, 16), 2 * 64 * 8 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(c, 16), 262144);  // 256 KiB
  EXPECT_EQ(kv_bytes_per_token(c, 32), 524288);
  EXPECT_EQ(kv_bytes_per_token(c, 8), 131072);
  EXPECT_EQ(kv_tokens_per_gb(c, 16), 3814);  // 1e9 / 262,144, rounded down
}

TEST(Memory, WeightBytes) {
  EXPECT_EQ(weight_bytes(qwen3_06b(), 16), 2 * 596049920LL);
  EXPECT_EQ(weight_bytes(qwen3_06b(), 3), 596049920LL * 3 / 8);
  EXPECT_EQ(weight_bytes(qwen3_32b(), 4), 32762123264LL / 2);  // 16.38 GB
  EXPECT_EQ(weight_bytes(qwen3_32b(), 32), 32762123264LL * 4);
}

// Design point 1: Qwen3-32B with 4-bit weights on a 24 GB GPU, 1 GB reserved,
// 16-bit K/V: (24e9 - 16381061632 - 1e9) / 262144 = 25249.6 tokens.
TEST(Memory, FitQwen3_32B_On24GB_4BitWeights) {
  MemoryBudget b;
  b.gpu_gb = 24;
  b.weight_bits = 4;
  const KvFit fit = fit_kv_cache(qwen3_32b(), b);
  EXPECT_TRUE(fit.weights_fit);
  EXPECT_TRUE(fit.cache_fits);
  EXPECT_DOUBLE_EQ(fit.weight_bytes, 16381061632.0);
  EXPECT_DOUBLE_EQ(fit.free_bytes, 24e9 - 16381061632.0 - 1e9);
  EXPECT_EQ(fit.kv_bytes_per_token, 262144);
  EXPECT_EQ(fit.tokens, 25249);
  EXPECT_EQ(fit.blocks, 25249 / 16);
  EXPECT_GE(fit.tokens, 24000);
  EXPECT_LE(fit.tokens, 26000);
}

TEST(Memory, FitScalesWithKvBitsAndReserve) {
  MemoryBudget b;
  b.weight_bits = 4;
  b.kv_bits = 8;
  b.reserve_gb = 0;
  const KvFit fit = fit_kv_cache(qwen3_32b(), b);
  EXPECT_EQ(fit.tokens, int64_t(std::floor((24e9 - 16381061632.0) / 131072)));
}

// GB to whole bytes, rounded: where the free bytes end on a token exactly, that token
// counts, though 1e9 times the GB given can be a hair under it as a double.
TEST(Memory, BytesThatEndOnATokenHoldIt) {
  MemoryBudget b;
  b.reserve_gb = 0;
  const ModelConfig c = qwen3_32b();
  int checked = 0;
  for (int64_t tokens = 1000; tokens < 1100; ++tokens) {
    const int64_t bytes = weight_bytes(c, b.weight_bits) + tokens * kv_bytes_per_token(c, b.kv_bits);
    b.gpu_gb = double(bytes) / 1e9;
    if (b.gpu_gb * 1e9 >= double(bytes)) continue;  // only the GB values a double puts a hair short
    ++checked;
    EXPECT_EQ(fit_kv_cache(c, b).tokens, tokens) << b.gpu_gb << " GB";
  }
  EXPECT_GT(checked, 0) << "no GB value in the range is short of its bytes as a double";
}

TEST(Memory, WeightsAloneDoNotFit) {
  MemoryBudget b;  // 16-bit Qwen3-32B: 65.5 GB of weights on 24 GB
  const KvFit fit = fit_kv_cache(qwen3_32b(), b);
  EXPECT_FALSE(fit.weights_fit);
  EXPECT_FALSE(fit.cache_fits);
  EXPECT_LT(fit.free_bytes, 0);
  EXPECT_EQ(fit.tokens, 0);
  EXPECT_EQ(fit.blocks, 0);
}

TEST(Memory, WeightsFitButReserveLeavesNoRoom) {
  MemoryBudget b;
  b.gpu_gb = 17;  // 16.38 GB of 4-bit weights + 1 GB reserve > 17 GB
  b.weight_bits = 4;
  const KvFit fit = fit_kv_cache(qwen3_32b(), b);
  EXPECT_TRUE(fit.weights_fit);
  EXPECT_FALSE(fit.cache_fits);
  EXPECT_EQ(fit.tokens, 0);
}

// A few bytes free, fewer than one token takes: no room, said so (it printed "0
// tokens" with no word of why).
TEST(Memory, FreeBytesShortOfOneTokenAreNoRoom) {
  MemoryBudget b;
  b.gpu_gb = 17.3813;  // 16.3810 GB of 4-bit weights + 1 GB reserve: 238,368 bytes left
  b.weight_bits = 4;
  const KvFit fit = fit_kv_cache(qwen3_32b(), b);
  EXPECT_GT(fit.free_bytes, 0);
  EXPECT_LT(fit.free_bytes, fit.kv_bytes_per_token);
  EXPECT_FALSE(fit.cache_fits);
  EXPECT_EQ(fit.tokens, 0);
}

TEST(Memory, BadInputIsAnError) {
  const ModelConfig c = qwen3_06b();
  for (int bits : {2, 3, 4, 8, 16, 32}) EXPECT_NO_THROW(check_weight_bits(bits)) << bits;
  for (int bits : {0, 1, 5, 6, 12, 64, -4}) EXPECT_THROW(check_weight_bits(bits), Error) << bits;
  for (int bits : {8, 16, 32}) EXPECT_NO_THROW(check_kv_bits(bits)) << bits;
  for (int bits : {2, 4, 0, 64}) EXPECT_THROW(kv_bytes_per_token(c, bits), Error) << bits;
  EXPECT_THROW(weight_bytes(c, 5), Error);

  MemoryBudget b;
  b.gpu_gb = -1;
  EXPECT_THROW(fit_kv_cache(c, b), Error);
  b.gpu_gb = NAN;
  EXPECT_THROW(fit_kv_cache(c, b), Error);
  b.gpu_gb = 1e30;  // its token count would overflow int64 (it printed "-0 tokens")
  EXPECT_THROW(fit_kv_cache(c, b), Error);
  b.gpu_gb = 1e6;   // a petabyte is the largest taken
  EXPECT_NO_THROW(fit_kv_cache(c, b));
  EXPECT_GT(fit_kv_cache(c, b).tokens, 0);
  b = MemoryBudget{};
  b.reserve_gb = -0.5;
  EXPECT_THROW(fit_kv_cache(c, b), Error);
  b = MemoryBudget{};
  b.gpu_gb = 0;  // a 0 GB GPU is an answer (nothing fits), not an error
  EXPECT_NO_THROW(fit_kv_cache(c, b));
}

TEST(Memory, MissingConfigIsAnError) {
  EXPECT_THROW(load_config_file(test::source_path("assets/configs/no-such-config.json")), Error);
}

// Runs `kvscope memory ARGS`; `streams` is the shell redirection choosing what is captured.
test::ProgramRun run_memory(const std::string& args, const std::string& streams) {
  return test::run_shell(test::binary_path("kvscope") + " memory " + args + " " + streams);
}
std::string config_arg(const std::string& name) { return "--config '" + test::source_path("assets/configs/" + name) + "'"; }
const char* kStdout = "2>/dev/null";
const char* kStderr = "2>&1 >/dev/null";

TEST(MemoryCommand, Qwen3_32B_On24GB_4Bit) {
  const test::ProgramRun r = run_memory(config_arg("qwen3-32b-config.json") + " --gpu-gb 24 --weight-bits 4", kStdout);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2 x 64 layers x 8 KV heads x 128 dims x 2 bytes = 262,144 bytes = 256 KiB per token"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("32,762,123,264 parameters"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("16.38 GB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("25,249 tokens = 1,578 blocks of 16 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CUDA context"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("do not fit"), std::string::npos) << r.output;
}

TEST(MemoryCommand, Qwen3_06B) {
  const test::ProgramRun r = run_memory(config_arg("qwen3-0.6b-config.json"), kStdout);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2 x 28 layers x 8 KV heads x 128 dims x 2 bytes = 114,688 bytes = 112 KiB per token"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("596,049,920 parameters"), std::string::npos) << r.output;
}

TEST(MemoryCommand, WeightsAloneDoNotFitIsAnAnswer) {
  const test::ProgramRun r = run_memory(config_arg("qwen3-32b-config.json") + " --gpu-gb 24 --weight-bits 16", kStdout);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("256 KiB per token"), std::string::npos) << r.output;  // the table is still printed
  EXPECT_NE(r.output.find("the weights alone do not fit"), std::string::npos) << r.output;
}

// The bundled model's 2.6 MB of weights and a GPU of 0.01 GB: sizes under 0.1 GB
// keep three significant digits instead of reading "0.00 GB".
TEST(MemoryCommand, SmallSizesAreNotZeroGb) {
  const test::ProgramRun r =
      run_memory("--config '" + test::source_path("assets/model/config.json") + "' --gpu-gb 0.01 --reserve-gb 0.001",
                 kStdout);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2,624,256 bytes = 0.00262 GB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("     0.01 GB  GPU memory\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("- 0.00262 GB  weights at 16 bits\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("-   0.001 GB  reserve"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("= 0.00638 GB  free for the KV cache\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("0.00 GB"), std::string::npos) << r.output;
  // Zero itself keeps the two decimals ("0.00 GB", not "0 GB").
  const test::ProgramRun none =
      run_memory("--config '" + test::source_path("assets/model/config.json") + "' --gpu-gb 0.01 --reserve-gb 0",
                 kStdout);
  EXPECT_EQ(none.code, 0) << none.output;
  EXPECT_NE(none.output.find("-    0.00 GB  reserve"), std::string::npos) << none.output;
}

// One layer and one KV head (multi-query attention) read in the singular.
TEST(MemoryCommand, OneLayerAndOneKvHead) {
  const std::string path = test::binary_path("one_layer_mqa_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 160,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
    "vocab_size": 384, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
    "tie_word_embeddings": true})";
  const test::ProgramRun r = run_memory("--config '" + path + "'", kStdout);
  std::remove(path.c_str());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\n  1 layer, 4 query heads, 1 KV head, head_dim 32, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  8-bit: 2 x 1 layer x 1 KV head x 32 dims x 1 byte = 64 bytes = 0.06 KiB per token"),
            std::string::npos)
      << r.output;
}

TEST(MemoryCommand, AnEightyGbGpu) {
  const test::ProgramRun r = run_memory(config_arg("qwen3-32b-config.json") + " --gpu-gb 80", kStdout);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\nFit on an 80 GB GPU (1 GB = 1e9 bytes), K/V at 16 bits:\n"), std::string::npos) << r.output;
}

// Each bad input: exit code 1 and one line "kvscope: error: ..." naming the problem.
TEST(MemoryCommand, BadInputExitsWithOneLineError) {
  const std::string c32 = config_arg("qwen3-32b-config.json");
  const std::pair<std::string, std::string> cases[] = {
      {c32 + " --weight-bits 5", "--weight-bits"},
      {c32 + " --kv-bits 4", "--kv-bits"},
      {c32 + " --gpu-gb=-24", "--gpu-gb: must be 0 or more, not -24"},
      {c32 + " --gpu-gb 1e30", "--gpu-gb: must be 1000000 or less, not 1e30"},  // was "-0 tokens": int64 overflow
      {c32 + " --reserve-gb 1e30", "--reserve-gb: must be 1000000 or less"},
      {c32 + " --reserve-gb=-1", "--reserve-gb: must be 0 or more"},
      {config_arg("no-such-config.json"), "no-such-config.json"},
  };
  for (const auto& [args, names] : cases) {
    const test::ProgramRun r = run_memory(args, kStderr);
    EXPECT_EQ(r.code, 1) << args << ": " << r.output;
    EXPECT_EQ(r.output.rfind("kvscope: error: ", 0), 0u) << args << ": " << r.output;
    EXPECT_NE(r.output.find(names), std::string::npos) << args << ": " << r.output;
    ASSERT_FALSE(r.output.empty());
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
  }
}

}  // namespace
}  // namespace kvscope
