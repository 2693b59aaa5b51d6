// Corrupt and mismatched checkpoints: each gives a one-line error naming the
// file and the problem, from the library (kvscope::Error) and from the program
// (exit code 1, "kvscope: error: ..."). The bad checkpoints are made here, by
// copying tests/models/tiny-tied and breaking one thing in it.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/weights.h"
#include "run_kvscope.h"
#include "safetensors_parts.h"
#include "util/error.h"
#include "util/json_depth.h"
#include "util/file.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using Parts = test::SafetensorsParts;

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// A fresh copy of a tiny model in a temporary folder, removed afterwards.
class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { make_copy("tiny-tied"); }
  void TearDown() override { fs::remove_all(dir_); }

  void make_copy(const std::string& model) {
    if (!dir_.empty()) fs::remove_all(dir_);
    dir_ = fs::temp_directory_path() / ("kvscope-broken-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::copy(test::tiny_model(model), dir_);
  }
  fs::path weights() const { return dir_ / "model.safetensors"; }
  fs::path config() const { return dir_ / "config.json"; }

  void edit_weights(const std::function<void(Parts&)>& f) {
    Parts p = test::split_safetensors(read_file(weights()));
    f(p);
    write(weights(), test::join_safetensors(p.header, p.data));
  }
  void edit_config(const std::function<void(json&)>& f) {
    json c = json::parse(read_file(config()));
    f(c);
    write(config(), c.dump(2));
  }

  // The library's message, which must name `file` and contain `problem`;
  // then the same through the program: exit code 1 and one line on stderr.
  void expect_error(const fs::path& file, const std::string& problem) {
    std::string message;
    try {
      load_model(dir_.string());
      ADD_FAILURE() << "loading did not fail; expected: " << problem;
      return;
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(file.string()), std::string::npos) << message;
    EXPECT_NE(message.find(problem), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;

    const test::ProgramRun r = test::run_shell(test::binary_path("kvscope") + " generate --model '" + dir_.string() +
                                               "' --prompt hi -n 1 2>&1 >/dev/null");  // stderr only
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(r.output, "kvscope: error: " + message + "\n");
  }

  fs::path dir_;
};

TEST_F(BrokenCheckpoint, IntactCopyLoads) { EXPECT_NO_THROW(load_model(dir_.string())); }

TEST_F(BrokenCheckpoint, TruncatedFile) {
  std::string bytes = read_file(weights());
  write(weights(), bytes.substr(0, bytes.size() - 100));
  expect_error(weights(), "truncated file?");
}

TEST_F(BrokenCheckpoint, TooShortForAHeader) {
  write(weights(), "abc");
  expect_error(weights(), "too short for a safetensors file");
}

TEST_F(BrokenCheckpoint, HeaderLongerThanFile) {
  std::string bytes = read_file(weights());
  const uint64_t n = bytes.size();  // claims more than the whole file
  for (int i = 0; i < 8; ++i) bytes[i] = char((n >> (8 * i)) & 0xff);
  write(weights(), bytes);
  expect_error(weights(), "exceeds the file size");
}

// The format caps a header at 100,000,000 bytes; a file (sparse here) long enough
// to hold one longer is refused before its header is parsed.
TEST_F(BrokenCheckpoint, HeaderOverTheFormatsLimit) {
  for (const uint64_t n : {uint64_t(100'000'000), uint64_t(100'000'001)}) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = char((n >> (8 * i)) & 0xff);
    write(weights(), bytes + "{}");
    fs::resize_file(weights(), 8 + n + 16);
    if (n == 100'000'000)  // at the limit: read (no tensors), refused only for the data after it
      expect_error(weights(), "16 bytes after the last tensor");
    else
      expect_error(weights(), "header length 100000001 is over the format's limit of 100000000 bytes");
  }
}

TEST_F(BrokenCheckpoint, HeaderIsNotJson) {
  std::string bytes = read_file(weights());
  bytes[8] = '[';
  bytes[9] = '}';
  write(weights(), bytes);
  expect_error(weights(), "header is not valid JSON");
}

// JSON nested 100,000 deep: nlohmann parses it, but copying or printing a value
// recurses once per level, and the error message that printed such an eos_token_id
// overflowed the stack (SIGSEGV). Each JSON file is refused by its depth first.
std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

TEST_F(BrokenCheckpoint, JsonNestedDeeperThanAnyRealFileIsRefused) {
  const std::string deep = nested(100000), too_deep = "JSON nested more than 64 levels deep";
  const std::string config_text = read_file(config());
  write(config(), "{\"eos_token_id\": " + deep + ", " + config_text.substr(1));
  expect_error(config(), too_deep + " (at byte 80)");  // '{' is level 1, the 64th '[' level 65
  write(config(), config_text);
  write(dir_ / "generation_config.json", "{\"eos_token_id\": " + deep + "}");
  expect_error(dir_ / "generation_config.json", too_deep);
  fs::remove(dir_ / "generation_config.json");
  const std::string header = "{\"x\": " + deep + "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  write(weights(), bytes + header);
  expect_error(weights().string() + " (header)", too_deep);
  make_copy("tiny-bf16-sharded");
  write(dir_ / "model.safetensors.index.json", "{\"weight_map\": {}, \"metadata\": " + deep + "}");
  expect_error(dir_ / "model.safetensors.index.json", too_deep);
}

TEST(JsonDepth, SixtyFourLevelsReadAndSixtyFiveAreRefusedCountingOutsideStrings) {
  EXPECT_NO_THROW(check_json_depth(nested(64), "x.json"));
  EXPECT_THROW(check_json_depth(nested(65), "x.json"), Error);
  // Brackets in a string are text, an escaped quote does not end it; after the
  // string, the count goes on where it was.
  const std::string in_string =
      "[\"" + std::string(100, '[') + "\\\"" + std::string(100, '{') + "\", " + nested(63) + "]";
  EXPECT_NO_THROW(check_json_depth(in_string, "x.json"));
  EXPECT_THROW(check_json_depth("[\"\\\\\", " + nested(64) + "]", "x.json"), Error);  // "\\" ends there
  // After a byte order mark too (nlohmann skips one). A text that does not start as
  // an array or an object is the parser's (a binary file's bytes once counted as
  // brackets: "model.safetensors: JSON nested more than 64 levels deep").
  EXPECT_THROW(check_json_depth("\xEF\xBB\xBF " + nested(65), "x.json"), Error);
  EXPECT_NO_THROW(check_json_depth("\x89PNG" + nested(65), "x.json"));
  EXPECT_NO_THROW(check_json_depth("[]" + nested(65), "x.json"));  // after the value: trailing bytes, the parser's
  // Deep one after another is not deep.
  std::string siblings = "[";
  for (int i = 0; i < 1000; ++i) siblings += nested(60) + ",";
  EXPECT_NO_THROW(check_json_depth(siblings + "0]", "x.json"));
}

TEST_F(BrokenCheckpoint, OverlappingOffsets) {
  edit_weights([](Parts& p) {
    // Slide one tensor 4 bytes back, into the end of the one before it.
    auto& off = p.header["model.norm.weight"]["data_offsets"];
    ASSERT_GT(off[0].get<uint64_t>(), 0u);
    off = {off[0].get<uint64_t>() - 4, off[1].get<uint64_t>() - 4};
  });
  expect_error(weights(), "overlaps the previous tensor");
}

// An empty tensor takes no bytes, so it may start where another starts (the Rust
// safetensors reader orders ranges by begin, then end). Ordered by begin alone, the
// file read or not by the names' order: "a.empty" passed, "z.empty" "overlapped".
TEST_F(BrokenCheckpoint, AnEmptyTensorMayShareAnOffset) {
  for (const char* name : {"a.empty", "z.empty"}) {
    SCOPED_TRACE(name);
    make_copy("tiny-tied");
    edit_weights([&](Parts& p) { p.header[name] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}}; });
    EXPECT_NO_THROW(SafetensorsFile{weights().string()});
  }
}

TEST_F(BrokenCheckpoint, OffsetsOutsideTheFile) {
  edit_weights([&](Parts& p) {
    auto& off = p.header["model.norm.weight"]["data_offsets"];
    const uint64_t len = off[1].get<uint64_t>() - off[0].get<uint64_t>();
    off = {p.data.size(), p.data.size() + len};
  });
  expect_error(weights(), "truncated file?");
}

TEST_F(BrokenCheckpoint, TrailingBytesAfterTheLastTensor) {
  write(weights(), read_file(weights()) + std::string(24, '\0'));  // oversized: data no tensor claims
  expect_error(weights(), "24 bytes after the last tensor");
}

TEST_F(BrokenCheckpoint, OffsetsLeaveAGapOrRunBackwards) {
  edit_weights([](Parts& p) {
    auto& off = p.header["model.norm.weight"]["data_offsets"];
    off = {off[0].get<uint64_t>() + 4, off[1].get<uint64_t>() + 4};  // 4 unclaimed bytes before it
    p.data += std::string(4, '\0');
  });
  expect_error(weights(), "gap in the data before tensor \"model.norm.weight\"");
  edit_weights([](Parts& p) { p.header["model.norm.weight"]["data_offsets"] = {8, 4}; });
  expect_error(weights(), "data_offsets end before they begin");
}

// A header entry missing a field, or with offsets that are not two counts, is named
// with its tensor (the fuzz target only checks that nothing crashes on these).
TEST_F(BrokenCheckpoint, HeaderEntriesOfTheWrongForm) {
  edit_weights([](Parts& p) { p.header["model.norm.weight"].erase("dtype"); });
  expect_error(weights(), "tensor \"model.norm.weight\": header entry needs dtype, shape and data_offsets");
  make_copy("tiny-tied");
  edit_weights([](Parts& p) { p.header["model.norm.weight"]["data_offsets"] = {-4, 60}; });
  expect_error(weights(), "tensor \"model.norm.weight\": data_offsets must be two non-negative integers");
  make_copy("tiny-tied");
  edit_weights([](Parts& p) { p.header["model.norm.weight"]["data_offsets"].erase(1); });
  expect_error(weights(), "tensor \"model.norm.weight\": data_offsets must be two non-negative integers");
}

TEST_F(BrokenCheckpoint, UnsupportedDtype) {
  edit_weights([](Parts& p) { p.header["model.norm.weight"]["dtype"] = "I8"; });
  expect_error(weights(), "dtype I8");
}

TEST_F(BrokenCheckpoint, DtypeDisagreesWithByteCount) {
  edit_weights([](Parts& p) { p.header["model.norm.weight"]["dtype"] = "BF16"; });  // F32 bytes, BF16 claimed
  expect_error(weights(), "shape and dtype need");
}

// 2^40 x 2^40 elements: the product, 2^80, wraps to 0 in 64 bits, which a check of
// the bytes alone would take for an empty tensor.
TEST_F(BrokenCheckpoint, ShapeWhoseProductOverflowsIsRefused) {
  edit_weights([](Parts& p) { p.header["model.norm.weight"]["shape"] = {uint64_t(1) << 40, uint64_t(1) << 40}; });
  expect_error(weights(), "shape is absurdly large");
}

TEST_F(BrokenCheckpoint, ShapeDisagreesWithConfig) {
  edit_weights([](Parts& p) {
    auto& shape = p.header["model.layers.0.mlp.up_proj.weight"]["shape"];
    shape = {shape[0].get<int64_t>() * 2, shape[1].get<int64_t>() / 2};  // same bytes, wrong shape
  });
  expect_error(weights(), "\"model.layers.0.mlp.up_proj.weight\" has shape [320, 32] but config.json implies [160, 64]");
}

TEST_F(BrokenCheckpoint, ConfigDisagreesWithWeights) {
  edit_config([](json& c) { c["intermediate_size"] = 128; });
  expect_error(weights(), "\"model.layers.0.mlp.down_proj.weight\" has shape [64, 160] but config.json implies [64, 128]");
}

TEST_F(BrokenCheckpoint, MissingTensor) {
  edit_weights([](Parts& p) {
    p.header["model.layers.1.self_attn.k_norm.weight_renamed"] = p.header["model.layers.1.self_attn.k_norm.weight"];
    p.header.erase("model.layers.1.self_attn.k_norm.weight");
  });
  expect_error(dir_, "missing tensor \"model.layers.1.self_attn.k_norm.weight\"");
}

TEST_F(BrokenCheckpoint, UnexpectedTensor) {
  make_copy("tiny-untied");
  edit_config([](json& c) { c["num_hidden_layers"] = 1; });  // layer 1's tensors are now extra
  expect_error(weights(), "unexpected tensor \"model.layers.1.");
}

TEST_F(BrokenCheckpoint, UntiedModelWithoutLmHead) {
  edit_config([](json& c) { c["tie_word_embeddings"] = false; });
  expect_error(dir_, "missing tensor \"lm_head.weight\"");
}

// A tied model may still carry an lm_head.weight (tying ignores it); its shape is checked too.
TEST_F(BrokenCheckpoint, TiedLmHeadOfTheWrongShape) {
  make_copy("tiny-tied-with-head");
  edit_weights([](Parts& p) { p.header["lm_head.weight"]["shape"] = {64, 384}; });  // the same bytes, transposed
  expect_error(weights(), "tensor \"lm_head.weight\" has shape [64, 384] but config.json implies [384, 64]");
}

TEST_F(BrokenCheckpoint, ConfigIsNotJson) {
  write(config(), "{\"hidden_size\": 64,");
  expect_error(config(), "not valid JSON");
}

// Valid JSON that is not an object was called "not valid JSON".
TEST_F(BrokenCheckpoint, GenerationConfigThatIsNotAnObject) {
  const fs::path gen = dir_ / "generation_config.json";
  write(gen, "[1]");
  expect_error(gen, "expected a JSON object");
  write(gen, "{\"eos_token_id\": ");
  expect_error(gen, "not valid JSON");
}

TEST_F(BrokenCheckpoint, ConfigIsADirectory) {  // once "not valid JSON": a directory reads as empty
  fs::remove(config());
  fs::create_directory(config());
  expect_error(config(), "is a directory, not a file");
}

TEST_F(BrokenCheckpoint, UnknownArchitecture) {
  edit_config([](json& c) {
    c["model_type"] = "llama";
    c["architectures"] = {"LlamaForCausalLM"};
  });
  expect_error(config(), "unsupported architecture (model_type \"llama\")");
}

TEST_F(BrokenCheckpoint, ConfigFieldOfWrongType) {
  edit_config([](json& c) { c["num_attention_heads"] = "four"; });
  expect_error(config(), "\"num_attention_heads\" must be a positive integer");
}

TEST_F(BrokenCheckpoint, NoWeightsAtAll) {
  fs::remove(weights());
  expect_error(dir_, "no model.safetensors");
}

TEST_F(BrokenCheckpoint, WeightsAreADirectory) {  // once "no model.safetensors or model.safetensors.index.json"
  fs::remove(weights());
  fs::create_directory(weights());
  expect_error(weights(), "is a directory, not a file");
}

// A named pipe in place of the weights, or of a shard the index names, is refused by
// name: the shard once hung the run (opening a pipe waits for a writer), and the
// single file was said to be missing.
TEST_F(BrokenCheckpoint, WeightsThatAreAPipeAreRefused) {
  fs::remove(weights());
  ASSERT_EQ(mkfifo(weights().c_str(), 0600), 0);
  expect_error(weights(), "not a regular file");
  make_copy("tiny-bf16-sharded");
  const fs::path shard = dir_ / "model-00002-of-00002.safetensors";
  fs::remove(shard);
  ASSERT_EQ(mkfifo(shard.c_str(), 0600), 0);
  expect_error(shard, "not a regular file");
}

// The tokenizer is read before the weights, which may take minutes to load: its
// problems are said first. And a folder named tokenizer.json is named as such (once
// "DIR/tokenizer.json/tokenizer.json: cannot open").
TEST_F(BrokenCheckpoint, TokenizerProblemsAreSaidBeforeTheWeightsLoad) {
  write(weights(), "not a safetensors file");
  fs::remove(dir_ / "tokenizer.json");
  fs::create_directory(dir_ / "tokenizer.json");
  const std::string generate =
      test::binary_path("kvscope") + " generate --model '" + dir_.string() + "' --prompt hi -n 1 2>&1 >/dev/null";
  EXPECT_EQ(test::run_shell(generate).output,
            "kvscope: error: " + (dir_ / "tokenizer.json").string() + ": is a directory, not a file\n");
  fs::remove(dir_ / "tokenizer.json");
  const test::ProgramRun missing = test::run_shell(generate);
  EXPECT_EQ(missing.output.rfind("kvscope: error: " + (dir_ / "tokenizer.json").string() + ": ", 0), 0u)
      << missing.output;
}

TEST_F(BrokenCheckpoint, ShardIndexWithoutAWeightMap) {
  make_copy("tiny-bf16-sharded");
  const fs::path index = dir_ / "model.safetensors.index.json";
  for (const char* text : {"[]", "{\"metadata\": {}}", "{\"weight_map\": [1]}", "{\"weight_map\": "}) {
    write(index, text);
    expect_error(index, "expected a JSON object with a \"weight_map\"");
  }
}

TEST_F(BrokenCheckpoint, ShardIndexPointsAtWrongFile) {
  make_copy("tiny-bf16-sharded");
  const fs::path index = dir_ / "model.safetensors.index.json";
  json j = json::parse(read_file(index));
  j["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  write(index, j.dump());
  expect_error(index, "weight_map puts \"model.norm.weight\" in model-00001-of-00002.safetensors");
}

// Loadable but suspicious: the model loads, Model::warnings says what is wrong,
// and the program prints it as "kvscope: warning: ..." and carries on (exit 0).
class SuspiciousCheckpoint : public BrokenCheckpoint {
 protected:
  void expect_warning(const std::string& warning) {
    Model m;
    ASSERT_NO_THROW(m = load_model(dir_.string()));
    ASSERT_EQ(m.warnings.size(), 1u);
    EXPECT_NE(m.warnings[0].find(warning), std::string::npos) << m.warnings[0];

    const test::ProgramRun r = test::run_shell(test::binary_path("kvscope") + " generate --model '" + dir_.string() +
                                               "' --prompt hi -n 1 --temperature 0 2>&1 >/dev/null");  // stderr only
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.rfind("kvscope: warning: " + m.warnings[0] + "\n", 0), 0u) << r.output;
  }

  // Sets element i of an F32 tensor.
  void set_f32(const std::string& tensor, size_t i, float value) {
    edit_weights([&](Parts& p) {
      const size_t at = p.header[tensor]["data_offsets"][0].get<size_t>() + 4 * i;
      std::memcpy(p.data.data() + at, &value, 4);
    });
  }
};

TEST_F(SuspiciousCheckpoint, NanWeightIsAWarningNotAnError) {
  // Untied, so the row of a token the prompt never uses holds the NaN: the run
  // itself stays finite, and only the warning tells.
  make_copy("tiny-untied");
  set_f32("model.embed_tokens.weight", 300 * 64 + 5, std::numeric_limits<float>::quiet_NaN());
  set_f32("model.embed_tokens.weight", 301 * 64, std::numeric_limits<float>::infinity());
  expect_warning(weights().string() + ": tensor \"model.embed_tokens.weight\" holds 2 NaN or infinite values (of 24576)");
}

// A tied checkpoint's lm_head.weight is never read (the embedding is the head): a NaN
// in it reaches no output, and once drew "its outputs will be NaN".
TEST_F(SuspiciousCheckpoint, NanInAnUnusedTensorIsNoWarning) {
  make_copy("tiny-tied-with-head");
  set_f32("lm_head.weight", 7, std::numeric_limits<float>::quiet_NaN());
  Model m;
  ASSERT_NO_THROW(m = load_model(dir_.string()));
  EXPECT_TRUE(m.warnings.empty()) << m.warnings.front();
  set_f32("model.embed_tokens.weight", 7, std::numeric_limits<float>::quiet_NaN());  // the head it does use
  ASSERT_NO_THROW(m = load_model(dir_.string()));
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_NE(m.warnings[0].find("tensor \"model.embed_tokens.weight\" holds 1 NaN or infinite value"), std::string::npos)
      << m.warnings[0];
}

TEST_F(SuspiciousCheckpoint, DtypeOtherThanTheConfigSaysIsAWarning) {
  edit_config([](json& c) { c["torch_dtype"] = "bfloat16"; });  // the tensors are F32
  expect_warning("is F32 but config.json says torch_dtype \"bfloat16\" (as are 23 more tensors); loaded as stored");
}

// torch_dtype is optional: a config without it says nothing the tensors could
// contradict (it was once read as "float32", and BF16 tensors drew a warning).
TEST_F(SuspiciousCheckpoint, NoTorchDtypeIsNoWarning) {
  make_copy("tiny-bf16-sharded");
  edit_config([](json& c) { c.erase("torch_dtype"); });
  Model m;
  ASSERT_NO_THROW(m = load_model(dir_.string()));
  EXPECT_TRUE(m.warnings.empty()) << m.warnings.front();
  edit_config([](json& c) { c["torch_dtype"] = "float32"; });  // and said, it is still checked
  expect_warning("is BF16 but config.json says torch_dtype \"float32\"");
}

// tiny-tied's config.json with `key` set to `value`, parsed as "x/config.json": the
// error must contain `part`.
void expect_config_error(const char* key, const json& value, const std::string& part) {
  json c = json::parse(read_file(test::tiny_model("tiny-tied") + "/config.json"));
  c[key] = value;
  try {
    parse_config(c.dump(), "x/config.json");
    ADD_FAILURE() << key << " = " << value.dump() << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Config, RejectsFeaturesKvscopeDoesNotImplement) {
  auto base = json::parse(read_file(test::tiny_model("tiny-tied") + "/config.json"));
  for (const char* key : {"attention_bias", "use_sliding_window"}) {
    json c = base;
    c[key] = true;
    EXPECT_THROW(parse_config(c.dump(), "x/config.json"), Error) << key;
  }
  json c = base;
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  EXPECT_THROW(parse_config(c.dump(), "x/config.json"), Error);
  c = base;
  c["num_key_value_heads"] = 3;  // 4 heads are not a multiple of 3
  EXPECT_THROW(parse_config(c.dump(), "x/config.json"), Error);
}

// layer_types, as transformers 4.53 and later write it: every layer full attention
// runs; a sliding-window layer, a count that is not the layers' or a non-list is
// refused by name.
TEST(Config, LayerTypesMustAllBeFullAttention) {
  const json base = json::parse(read_file(test::tiny_model("tiny-tied") + "/config.json"));
  const int layers = base["num_hidden_layers"].get<int>();
  json c = base;
  c["layer_types"] = json::array();
  for (int i = 0; i < layers; ++i) c["layer_types"].push_back("full_attention");
  EXPECT_NO_THROW(parse_config(c.dump(), "x/config.json"));
  json sliding = c["layer_types"];
  sliding[size_t(layers - 1)] = "sliding_attention";
  expect_config_error("layer_types", sliding,
                      "x/config.json: layer_types[" + std::to_string(layers - 1) +
                          "] is \"sliding_attention\": kvscope runs \"full_attention\" in every layer (no sliding window)");
  expect_config_error("layer_types", json::array({"full_attention"}),
                      "x/config.json: layer_types lists 1 layer, but num_hidden_layers is " + std::to_string(layers));
  expect_config_error("layer_types", "full_attention", "x/config.json: layer_types must be a list, got \"full_attention\"");
}

// What the forward pass cannot compute is refused by name: RoPE rotates pairs of a
// head's dimensions, and the MLP is SwiGLU (SiLU-gated).
TEST(Config, AnOddHeadDimAndAnotherActivationAreNamed) {
  expect_config_error("head_dim", 15, "x/config.json: head_dim must be even for rotary embeddings, got 15");
  expect_config_error("hidden_act", "gelu", "x/config.json: hidden_act must be \"silu\"");
}

// Token ids are ints: a larger one once wrapped (2^32 + 2 -> 2, a real token that
// would then end every generation), and a fraction was cut to its whole part.
TEST(Config, TokenIdsPastAnIntAreRefused) {
  const json base = json::parse(read_file(test::tiny_model("tiny-tied") + "/config.json"));
  for (const char* key : {"eos_token_id", "bos_token_id"})
    for (const json& id : {json((int64_t(1) << 32) + 2), json(-1), json(2.5), json::array({1, (int64_t(1) << 32) + 2})}) {
      if (std::string(key) == "bos_token_id" && id.is_array()) continue;  // bos is one id
      json c = base;
      c[key] = id;
      try {
        parse_config(c.dump(), "x/config.json");
        ADD_FAILURE() << key << " = " << id.dump() << " was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::string(key) + " must be"), std::string::npos) << e.what();
      }
    }
  json c = base;
  c["eos_token_id"] = {1, 2};
  c["bos_token_id"] = nullptr;  // as some configs write "none"
  EXPECT_EQ(parse_config(c.dump(), "x/config.json").eos_token_ids, (std::vector<int>{1, 2}));
}

TEST(Config, FieldsLeftOutTakeHuggingFacesDefaults) {
  // Qwen3Config's defaults, not another architecture's rules: head_dim 128 (not
  // hidden_size / heads, which would be 1 here and once, fuzzed, 0), rope_theta
  // 10000 (not Qwen3 releases' 1e6: the same file must give the same logits in
  // Hugging Face), 32 KV heads, or as many as query heads when written as null.
  json c = json::parse(read_file(test::tiny_model("tiny-tied") + "/config.json"));
  for (const char* key : {"head_dim", "rope_theta", "num_key_value_heads"}) c.erase(key);
  c["num_attention_heads"] = 64;
  ModelConfig m = parse_config(c.dump(), "x/config.json");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.rope_theta, 10000.0);
  EXPECT_EQ(m.num_kv_heads, 32);
  c["num_key_value_heads"] = nullptr;
  EXPECT_EQ(parse_config(c.dump(), "x/config.json").num_kv_heads, 64);
  // The model type decides: Qwen2's config is refused even if it names Qwen3's class.
  c["model_type"] = "qwen2";
  c["architectures"] = {"Qwen3ForCausalLM"};
  try {
    parse_config(c.dump(), "x/config.json");
    FAIL() << "accepted model_type qwen2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported architecture (model_type \"qwen2\")"), std::string::npos)
        << e.what();
  }
  c.erase("model_type");  // without one, the architectures list decides
  EXPECT_EQ(parse_config(c.dump(), "x/config.json").head_dim, 128);
}

// A field of the wrong type is named: it was "bad field: [json.exception.type_error.302]
// type must be string, but is number". And rms_norm_eps 1e300, a double, became
// infinity as a float and was accepted (generate then printed control bytes).
TEST(Config, AFieldOfTheWrongTypeOrSizeIsNamed) {
  expect_config_error("model_type", 5, "x/config.json: model_type must be a string, got 5");
  expect_config_error("rope_theta", "big", "rope_theta must be a number, got \"big\"");
  expect_config_error("rms_norm_eps", true, "rms_norm_eps must be a number, got true");
  expect_config_error("tie_word_embeddings", "yes", "tie_word_embeddings must be true or false, got \"yes\"");
  expect_config_error("torch_dtype", 16, "torch_dtype must be a string, got 16");
  expect_config_error("hidden_act", json::array({"silu"}), "hidden_act must be a string, got [\"silu\"]");
  expect_config_error("rms_norm_eps", 1e300, "to 3.40282e+38), got 1e+300");
  expect_config_error("rms_norm_eps", 0, "to 3.40282e+38), got 0");
  // 1e-50 became 0 as a float, and RMSNorm of a row of zeros NaN.
  expect_config_error("rms_norm_eps", 1e-50, "to 3.40282e+38), got 1e-50");
  // A subnormal is a float, but not a normal one: the message gives the range.
  expect_config_error("rms_norm_eps", 1e-40,
                      "rms_norm_eps must be a positive number a float holds (1.17549e-38, its smallest normal, to "
                      "3.40282e+38), got 1e-40");
  // RoPE uses float(rope_theta): 1e39 became infinity and left every band but the first
  // unrotated; 1e-50 became 0 and gave NaN angles. Both generated text, exit 0.
  expect_config_error("rope_theta", 1e39, "rope_theta must be a positive number a float holds, got 1e+39");
  expect_config_error("rope_theta", 1e-50, "rope_theta must be a positive number a float holds, got 1e-50");
  expect_config_error("rope_theta", 0, "rope_theta must be a positive number a float holds, got 0");
  expect_config_error("rope_theta", -10000, "rope_theta must be a positive number a float holds, got -10000");
}

// transformers 5 saves RoPE's base inside "rope_parameters" and the dtype as "dtype".
// Read only at the top level, such a file once ran with rope_theta 10000 (not its
// 1e6: other text, exit 0), and a rope_type "yarn" there was accepted while the same
// in rope_scaling was refused.
TEST(Config, ReadsTransformers5sRopeParametersAndDtype) {
  const json base = json::parse(read_file(test::tiny_model("tiny-tied") + "/config.json"));
  json c = base;
  c.erase("rope_theta");
  c.erase("torch_dtype");
  c["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};
  c["dtype"] = "bfloat16";
  ModelConfig m = parse_config(c.dump(), "x/config.json");
  EXPECT_EQ(m.rope_theta, 1e6);
  EXPECT_EQ(m.torch_dtype, "bfloat16");
  c["rope_theta"] = 1000000;  // the same theta twice is one theta
  EXPECT_EQ(parse_config(c.dump(), "x/config.json").rope_theta, 1e6);
  c["rope_parameters"] = {{"rope_type", "default"}};  // none inside: the top level's
  EXPECT_EQ(parse_config(c.dump(), "x/config.json").rope_theta, 1e6);

  c["rope_parameters"] = {{"rope_theta", 5e5}};
  try {
    parse_config(c.dump(), "x/config.json");
    ADD_FAILURE() << "two thetas were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_theta is 1000000 but rope_parameters' rope_theta is 500000.0"),
              std::string::npos)
        << e.what();
  }

  const std::vector<std::pair<json, std::string>> refused = {
      {{{"rope_type", "yarn"}, {"factor", 4.0}},
       "rope_parameters' rope_type \"yarn\" is not supported by kvscope (plain RoPE, \"default\", only)"},
      {{{"type", "linear"}}, "rope_parameters' rope_type \"linear\" is not supported"},
      {{{"partial_rotary_factor", 0.5}}, "rope_parameters' partial_rotary_factor 0.5 is not supported"},
      {{{"rope_theta", "big"}}, "rope_parameters' rope_theta must be a number, got \"big\""},
      {{{"rope_theta", 1e39}}, "rope_parameters' rope_theta must be a positive number a float holds, got 1e+39"},
      {json::array({1e6}), "rope_parameters must be an object, got [1000000.0]"},
  };
  for (const auto& [parameters, part] : refused) {
    json r = base;
    r.erase("rope_theta");
    r["rope_parameters"] = parameters;
    try {
      parse_config(r.dump(), "x/config.json");
      ADD_FAILURE() << parameters.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
  expect_config_error("partial_rotary_factor", 0.5, "partial_rotary_factor 0.5 is not supported by kvscope");
  c = base;
  c["partial_rotary_factor"] = 1.0;  // all of each head: plain RoPE
  EXPECT_NO_THROW(parse_config(c.dump(), "x/config.json"));
}

// Each field may be up to 2^30, but not their products: 2^30 layers of head_dim
// 2^30 once made `kvscope memory` divide by a K/V size that had wrapped to 0
// (SIGFPE), and printed a negative byte count for others.
TEST(Config, SizesWhoseProductsOverflowAreRefused) {
  const json base = json::parse(read_file(test::tiny_model("tiny-tied") + "/config.json"));
  const auto expect_refused = [&](const json& c, const std::string& part) {
    try {
      parse_config(c.dump(), "x/config.json");
      ADD_FAILURE() << c.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  json c = base;
  c["head_dim"] = 1 << 30;  // 4 heads: q_proj would have 2^32 rows
  expect_refused(c, "num_attention_heads x head_dim = 4294967296 is more than kvscope handles (2^30)");
  c = base;
  c["num_hidden_layers"] = 1 << 30;
  c["intermediate_size"] = 1 << 30;
  expect_refused(c, "parameters, more than kvscope handles (1e15)");

  // Just inside: 2^30 layers of a tiny width load, and the count is still exact
  // (a parameter count is linear in the layers).
  const auto parameters = [&](int layers) {
    json l = base;
    l["num_hidden_layers"] = layers;
    return parse_config(l.dump(), "x/config.json").parameter_count();
  };
  const int64_t per_layer = parameters(2) - parameters(1);
  EXPECT_EQ(parameters(1 << 30), parameters(1) + ((int64_t(1) << 30) - 1) * per_layer);
  EXPECT_GT(parameters(1 << 30), int64_t(1e13));
}

TEST(Config, ReadsTheRealQwen3Configs) {
  ModelConfig small = load_config_file(test::source_path("assets/configs/qwen3-0.6b-config.json"));
  EXPECT_EQ(small.head_dim, 128);
  EXPECT_EQ(small.hidden_size / small.num_heads, 64);
  EXPECT_TRUE(small.tie_word_embeddings);
  EXPECT_EQ(small.eos_token_ids, std::vector<int>{151645});
  ModelConfig big = load_config_file(test::source_path("assets/configs/qwen3-32b-config.json"));
  EXPECT_EQ(big.num_layers, 64);
  EXPECT_EQ(big.num_kv_heads, 8);
  EXPECT_FALSE(big.tie_word_embeddings);
}

}  // namespace
}  // namespace kvscope
