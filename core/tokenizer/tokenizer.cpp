// Byte-level BPE tokenizer, read from a Hugging Face tokenizer.json (Qwen3's).
// See tokenizer.h for the steps; this file follows them top to bottom:
// UTF-8 helpers, byte-level alphabet, normalisation, the split regex, loading,
// encoding (added tokens, then BPE per word), decoding.
#include "tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "util/error.h"
#include "util/file.h"
#include "util/json_depth.h"
#include "util/json_int.h"

namespace kvscope {

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------
// UTF-8

constexpr int kIncomplete = -1;

// The bytes from s[i] that begin a UTF-8 character (0: none does), and in `len` the
// length the character's first byte asks for (0 for a byte that starts none: a stray
// continuation byte, C0, C1, F5..FF). The second byte's range rules out overlong
// forms, surrogates and code points above U+10FFFF.
int utf8_valid_prefix(std::string_view s, size_t i, int& len) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  unsigned char lo = 0x80, hi = 0xBF;  // the range allowed for the second byte
  if (c < 0x80) {
    len = 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // would be overlong
    if (c == 0xED) hi = 0x9F;  // would be a surrogate
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // would be overlong
    if (c == 0xF4) hi = 0x8F;  // would be above U+10FFFF
  } else {
    len = 0;
    return 0;
  }
  int k = 1;
  for (; k < len && i + size_t(k) < s.size(); ++k) {
    const unsigned char b = byte(i + size_t(k));
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
  }
  return k;
}

// The length of the UTF-8 character starting at s[i] when it is complete and well
// formed; 0 when the bytes there can never be one (stray continuation byte,
// overlong form, surrogate, above U+10FFFF); kIncomplete when they are a valid
// beginning cut off by the end of s.
int utf8_char_length(std::string_view s, size_t i) {
  int len = 0;
  const int valid = utf8_valid_prefix(s, i, len);
  if (valid == len && len > 0) return len;
  return valid > 0 && i + size_t(valid) == s.size() ? kIncomplete : 0;
}

// The offset of the first byte that is not part of a valid character, or npos.
size_t first_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int n = utf8_char_length(s, i);
    if (n <= 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::string utf8_encode(int32_t cp) {
  utf8proc_uint8_t buf[4];
  auto n = utf8proc_encode_char(cp, buf);
  return std::string(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
}

// ---------------------------------------------------------------------------
// GPT-2 byte-level alphabet (bytes_to_unicode).
//
// BPE vocabularies are written in an alphabet of 256 visible characters, one per
// byte: the printable bytes '!'..'~', '¡'..'¬', '®'..'ÿ' stand for themselves and
// the other 68 (controls, space, ...) are moved to U+0100 onwards, so the space
// byte is "Ġ" (U+0120) and newline is "Ċ" (U+010A).

std::array<int32_t, 256> byte_to_unicode() {
  std::array<int32_t, 256> table{};
  int32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? b : next++;
  }
  return table;
}

// A vocabulary entry in the byte-level alphabet -> its raw bytes. A character
// outside the alphabet (none in Qwen's vocabulary) is kept as its own UTF-8.
std::string byte_level_to_bytes(const std::string& token) {
  // Code point -> byte, -1 for characters outside the alphabet (all are below U+0144).
  static const std::vector<int> to_byte = [] {
    std::vector<int> m(0x144, -1);
    auto table = byte_to_unicode();
    for (int b = 0; b < 256; ++b) m[table[b]] = b;
    return m;
  }();
  std::string out;
  auto* p = reinterpret_cast<const utf8proc_uint8_t*>(token.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(token.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) return token;  // not UTF-8 (nlohmann rejects that already): keep as is
    if (cp < static_cast<int32_t>(to_byte.size()) && to_byte[cp] >= 0) {
      out += static_cast<char>(to_byte[cp]);
    } else {
      out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
    }
    p += n;
    left -= n;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Small JSON helpers: every problem becomes "PATH: what".

const json& require(const json& object, const char* key, const std::string& name, const std::string& path) {
  if (!object.is_object() || !object.contains(key)) throw file_error(path, "missing \"" + name + "\"");
  return object.at(key);
}

// object[key], which must be a list: a Sequence's steps (null or an object would
// read as no steps, and tokenize differently without a word).
const json& require_list(const json& object, const char* key, const std::string& name, const std::string& path) {
  const json& v = require(object, key, name, path);
  if (!v.is_array()) throw file_error(path, name + " must be a list, got " + v.type_name());
  return v;
}

// A JSON string value rendered for a message, quoted.
std::string json_quote(const std::string& s) { return json(s).dump(); }

}  // namespace

// ---------------------------------------------------------------------------
// The compiled split regex (PCRE2, UTF + Unicode properties, JIT when available).

// Unicode's White_Space, which Hugging Face's regex engine (Oniguruma) takes for \s.
// PCRE2's \s also matches U+180E (MONGOLIAN VOWEL SEPARATOR): "x\u180e's" would split
// as "x", "\u180e", "'s" where Hugging Face has "x", "\u180e'", "s".
static constexpr std::string_view kWhiteSpace =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string spell_out_white_space(const std::string& pattern, const std::string& path) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 'Q') {  // quoted up to \E (or the end)
        const size_t end = std::min(pattern.find("\\E", i + 1), pattern.size());
        out.append(pattern, i - 1, end - (i - 1));
        i = end + 1;  // on the E, or past the end
        if (end < pattern.size()) out += "\\E";
      } else if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        if (in_class) throw file_error(path, "pre_tokenizer regex: \\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
    } else if (c == '[' && in_class && pattern.compare(i, 2, "[:") == 0 &&
               pattern.find(":]", i + 2) != std::string::npos) {  // [:alpha:] inside a class
      const size_t end = pattern.find(":]", i + 2);
      out.append(pattern, i, end + 2 - i);
      i = end + 1;
    } else if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a leading ] is literal
    } else {
      if (c == ']') in_class = false;
      out += c;
    }
  }
  return out;
}

struct Tokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }

  static pcre2_code* compile_or_throw(const std::string& pattern, const std::string& path) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw file_error(path, "pre_tokenizer regex does not compile at offset " + std::to_string(offset) +
                                 ": " + reinterpret_cast<char*>(message));
    }
    return code;
  }

  // The pattern as tokenizer.json has it; it runs with \s spelled out (see kWhiteSpace).
  static std::unique_ptr<Regex> compile(const std::string& pattern, const std::string& path) {
    pcre2_code_free(compile_or_throw(pattern, path));  // its errors at its own offsets
    auto re = std::make_unique<Regex>();
    re->code = compile_or_throw(spell_out_white_space(pattern, path), path);
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // a speed-up only; the interpreter is the fallback
    return re;
  }

  // The pieces of s ("Isolated" split): every match, and every stretch between
  // matches. s must be valid UTF-8 (checked once in encode()).
  std::vector<std::string_view> split(std::string_view s) const {
    std::vector<std::string_view> pieces;
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
    size_t pos = 0;   // where the next search starts
    size_t done = 0;  // s[0, done) is already in pieces
    while (pos < s.size()) {
      int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, PCRE2_NO_UTF_CHECK,
                           match.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof message);
        throw Error(std::string("pre-tokenizer regex failed: ") + reinterpret_cast<char*>(message));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
      size_t start = ovector[0], end = ovector[1];
      if (start > done) pieces.push_back(s.substr(done, start - done));  // the stretch before the match
      if (end > start) {
        pieces.push_back(s.substr(start, end - start));
        done = pos = end;
      } else {  // an empty match: step over one character, which joins the next stretch
        done = start;
        int n = utf8_char_length(s, start);
        pos = start + static_cast<size_t>(n > 0 ? n : 1);
      }
    }
    if (done < s.size()) pieces.push_back(s.substr(done));
    return pieces;
  }
};

// Word -> ids of recent words; encode() is const and may run on several threads.
struct Tokenizer::Cache {
  static constexpr size_t kMaxWordBytes = 256;    // longer words are not cached
  static constexpr size_t kMaxEntries = 1 << 16;  // then it starts over
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int>> words;
};

Tokenizer::Tokenizer() : cache_(std::make_unique<Cache>()) { byte_id_.fill(-1); }
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// ---------------------------------------------------------------------------
// Loading tokenizer.json

namespace {

// Qwen's pre-tokenizer has the split regex in a Split step and turns off the
// regex of ByteLevel; older GPT-2 style files leave the split to ByteLevel.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The split pattern of "pre_tokenizer": Sequence[Split(Regex, Isolated), ByteLevel]
// as in Qwen, or a lone ByteLevel with its GPT-2 regex. Anything else is refused
// rather than silently tokenized differently.
std::string read_split_pattern(const json& doc, const std::string& path) {
  const json& pre = require(doc, "pre_tokenizer", "pre_tokenizer", path);
  if (pre.is_null()) throw file_error(path, "pre_tokenizer is null; a ByteLevel pre_tokenizer is required");
  std::vector<json> steps;
  if (pre.value("type", "") == "Sequence") {
    for (const json& step : require_list(pre, "pretokenizers", "pre_tokenizer.pretokenizers", path))
      steps.push_back(step);
  } else {
    steps.push_back(pre);
  }
  std::string pattern;
  bool byte_level = false;
  for (const json& step : steps) {
    std::string type = step.value("type", "");
    if (type == "Split") {
      // After ByteLevel the regex would run on its alphabet (a space is "Ġ", a letter).
      if (byte_level)
        throw file_error(path, "pre_tokenizer: a Split after ByteLevel is not supported (Qwen's comes before)");
      const json& p = require(step, "pattern", "pre_tokenizer Split.pattern", path);
      if (!p.contains("Regex")) throw file_error(path, "pre_tokenizer Split: only a \"Regex\" pattern is supported");
      if (step.value("behavior", "") != "Isolated" || step.value("invert", false))
        throw file_error(path, "pre_tokenizer Split: only behavior \"Isolated\" without invert is supported");
      if (!pattern.empty()) throw file_error(path, "pre_tokenizer: more than one split regex is not supported");
      pattern = p.at("Regex").get<std::string>();
    } else if (type == "ByteLevel") {
      if (step.value("add_prefix_space", false))
        throw file_error(path, "pre_tokenizer ByteLevel: add_prefix_space is not supported");
      if (step.value("use_regex", true)) {
        if (!pattern.empty()) throw file_error(path, "pre_tokenizer: more than one split regex is not supported");
        pattern = kGpt2Pattern;
      }
      byte_level = true;
    } else {
      throw file_error(path, "pre_tokenizer " + json_quote(type) + " is not supported (Split and ByteLevel are)");
    }
  }
  if (!byte_level) throw file_error(path, "pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
  return pattern;
}

// A tokenizer's ids run from 0 up, one per token, with few gaps (Qwen's have none;
// small test files put added tokens at round numbers). An id at or beyond twice the
// tokens the file names (model.vocab and added_tokens) plus 1,024 is a broken file:
// refusing it keeps the tables sized by the largest id the size of the file.
size_t id_limit(size_t tokens) { return 2 * tokens + 1024; }

std::string beyond_the_tokens(size_t tokens) {
  return ", far beyond the " + std::to_string(tokens) + " tokens of the file (ids run from 0 up, one per token; at most " +
         std::to_string(id_limit(tokens)) + " ids)";
}

// model.vocab: byte-level token -> id. Ids must be distinct, non-negative and
// below id_limit(tokens).
std::unordered_map<std::string, int> read_vocab(const json& vocab, size_t tokens, const std::string& path) {
  std::unordered_map<std::string, int> ids;
  ids.reserve(vocab.size());
  std::vector<const std::string*> owner(id_limit(tokens), nullptr);  // id -> its token, to find duplicates
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      throw file_error(path, "model.vocab: token " + json_quote(token) + " has no valid id");
    if (id.get<uint64_t>() >= id_limit(tokens))
      throw file_error(path, "model.vocab: token " + json_quote(token) + " has id " + id.dump() + beyond_the_tokens(tokens));
    size_t i = id.get<size_t>();
    if (owner[i]) throw file_error(path, "model.vocab: duplicate id " + std::to_string(i) + " for " +
                                             json_quote(*owner[i]) + " and " + json_quote(token));
    owner[i] = &token;
    ids.emplace(token, static_cast<int>(i));
  }
  return ids;
}

// One entry of model.merges, "a b" or ["a", "b"], as its two tokens.
std::pair<std::string, std::string> read_merge(const json& merge, size_t rank, const std::string& path) {
  auto bad = [&] { return file_error(path, "model.merges[" + std::to_string(rank) + "] is not \"a b\" or [\"a\", \"b\"]"); };
  if (merge.is_string()) {
    const std::string& s = merge.get_ref<const std::string&>();
    size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) throw bad();
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string())
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  throw bad();
}

// The normaliser as utf8proc options, one entry per step: null (none), NFC (Qwen),
// another Unicode form, or a Sequence of those.
void read_normalizer(const json& n, std::vector<int>& forms, const std::string& path) {
  if (n.is_null()) return;
  std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const json& step : require_list(n, "normalizers", "normalizer.normalizers", path))
      read_normalizer(step, forms, path);
    return;
  }
  int compose = UTF8PROC_STABLE | UTF8PROC_COMPOSE, decompose = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
  if (type == "NFC") forms.push_back(compose);
  else if (type == "NFD") forms.push_back(decompose);
  else if (type == "NFKC") forms.push_back(compose | UTF8PROC_COMPAT);
  else if (type == "NFKD") forms.push_back(decompose | UTF8PROC_COMPAT);
  else throw file_error(path, "normalizer " + json_quote(type) + " is not supported (NFC, NFD, NFKC, NFKD are)");
}

// The post-processor's template for a single text: the special ids before and after
// it. TemplateProcessing's "single" lists {"SpecialToken": {"id": NAME}} and one
// {"Sequence": {"id": "A"}}; NAME's ids are in its "special_tokens". ByteLevel only
// trims offsets, which kvscope does not report, so it adds nothing.
void read_post_processor(const json& p, std::vector<int>& prefix, std::vector<int>& suffix, const std::string& path) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& step : require_list(p, "processors", "post_processor.processors", path))
      read_post_processor(step, prefix, suffix, path);
    return;
  }
  if (type != "TemplateProcessing")
    throw file_error(path, "post_processor " + json_quote(type) +
                               " is not supported (ByteLevel, TemplateProcessing and Sequence are)");
  const json& specials = require(p, "special_tokens", "post_processor.special_tokens", path);
  bool seen_text = false;
  for (const json& item : require(p, "single", "post_processor.single", path)) {
    if (item.contains("Sequence")) {
      if (seen_text) throw file_error(path, "post_processor.single names the text twice");
      seen_text = true;
      continue;
    }
    const json& name = require(require(item, "SpecialToken", "post_processor.single[]", path), "id",
                               "post_processor.single[].SpecialToken.id", path);
    const std::string token = name.get<std::string>();
    const json& entry = require(specials, token.c_str(), "post_processor.special_tokens[" + name.dump() + "]", path);
    for (const json& id : require(entry, "ids", "post_processor.special_tokens[].ids", path)) {
      if (!json_int_in(id, INT32_MIN, INT32_MAX))  // 2^32 + 5 is not 5
        throw file_error(path, "post_processor: id " + id.dump() + " is not a token id");
      (seen_text ? suffix : prefix).push_back(id.get<int>());
    }
  }
  if (!seen_text) throw file_error(path, "post_processor.single has no {\"Sequence\": {\"id\": \"A\"}}");
}

struct AddedToken {
  int id;
  std::string content;  // the text it stands for, e.g. "<|im_end|>"
  bool special;         // a control token rather than text
  bool normalized;      // matched in the normalised text, not the raw text
};

// "added_tokens": [{"id", "content", "special", "normalized"}, ...]; missing or null =
// none ("normalized" missing: false). Their lstrip/rstrip/single_word flags are all
// false in Qwen; one that is true would change what matches, and is refused.
std::vector<AddedToken> read_added_tokens(const json& doc, const std::string& path) {
  std::vector<AddedToken> added;
  if (!doc.contains("added_tokens") || doc["added_tokens"].is_null()) return added;
  for (const json& a : doc["added_tokens"]) {
    const json& id = require(a, "id", "added_tokens[].id", path);
    const json& content = require(a, "content", "added_tokens[].content", path);
    if (!json_int_in(id, 0, INT32_MAX) || !content.is_string() ||
        content.get<std::string>().empty())
      throw file_error(path, "added_tokens: entry " + a.dump() + " needs an id and a non-empty content");
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (a.contains(flag) && a[flag] != false)
        throw file_error(path, "added_tokens: " + json_quote(content.get<std::string>()) + " has " + flag + " = " +
                                   a[flag].dump() + ", which kvscope does not implement");
    added.push_back(
        {id.get<int>(), content.get<std::string>(), a.value("special", false), a.value("normalized", false)});
  }
  return added;
}

// model.merges, in rank order, as ids: left + right -> merged. Each token must be in
// the vocabulary, the merged one too.
struct MergeIds {
  int left, right, merged;
};
std::vector<MergeIds> read_merges(const json& model, const std::unordered_map<std::string, int>& vocab,
                                  const std::string& path) {
  const json& merges = require(model, "merges", "model.merges", path);
  if (!merges.is_array()) throw file_error(path, "model.merges is not an array");
  auto id_of = [&](const std::string& token, size_t rank, const std::string& what) {
    auto it = vocab.find(token);
    if (it == vocab.end())
      throw file_error(path, "model.merges[" + std::to_string(rank) + "] " + what + " " + json_quote(token) +
                                 ", which is not in model.vocab");
    return it->second;
  };
  std::vector<MergeIds> ids;
  ids.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    auto [a, b] = read_merge(merges[rank], rank, path);
    ids.push_back({id_of(a, rank, "names"), id_of(b, rank, "names"), id_of(a + b, rank, "makes")});
  }
  return ids;
}

// The id of each byte's single-byte token (what BPE starts from), -1 where the
// vocabulary has none.
std::array<int, 256> single_byte_ids(const std::unordered_map<std::string, int>& vocab) {
  std::array<int, 256> ids;
  ids.fill(-1);
  const auto alphabet = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(utf8_encode(alphabet[b]));
    if (it != vocab.end()) ids[b] = it->second;
  }
  return ids;
}

// The file to read for `path`: a model folder's tokenizer.json. (A folder named
// tokenizer.json is taken as the file, so that read_file says "is a directory, not a file".)
std::string tokenizer_file(const std::string& path) {
  if (std::filesystem::is_directory(path) && std::filesystem::path(path).filename() != "tokenizer.json")
    return (std::filesystem::path(path) / "tokenizer.json").string();
  return path;
}

// A JSON file parsed, or kvscope::Error naming the file.
json parse_json_file(const std::string& path) {
  try {
    const std::string text = read_file(path);
    check_json_depth(text, path);
    return json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range ("1e999")
    throw file_error(path, std::string("malformed JSON: ") + e.what());
  }
}

// Refuses the BPE options that kvscope does not implement.
void check_bpe_options(const json& model, const std::string& path) {
  const json& type = require(model, "type", "model.type", path);
  if (!type.is_string() || type.get<std::string>() != "BPE")
    throw file_error(path, "model.type is " + type.dump() + "; only \"BPE\" is supported");
  if (model.value("byte_fallback", false)) throw file_error(path, "model.byte_fallback is not supported");
  // Hugging Face emits a word that is itself in the vocabulary as one token, merges or not.
  if (model.contains("ignore_merges") && model["ignore_merges"] != false)
    throw file_error(path, "model.ignore_merges " + model["ignore_merges"].dump() +
                               " is not supported (kvscope always applies the merges; Qwen's file says false)");
  // BPE-dropout skips merges at random while training; an encoder must not.
  if (model.contains("dropout") && !model["dropout"].is_null())
    throw file_error(path,
                     "model.dropout " + model["dropout"].dump() + " is not supported (null: every merge applies)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
      throw file_error(path, std::string("model.") + key + " is not supported");
  }
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& tokenizer_json_path) {
  const std::string path = tokenizer_file(tokenizer_json_path);
  const json doc = parse_json_file(path);
  Tokenizer t;
  t.path_ = path;
  try {
    // The model: vocabulary, then merges in rank order.
    const json& model = require(doc, "model", "model", path);
    check_bpe_options(model, path);
    const json& vocab_json = require(model, "vocab", "model.vocab", path);
    if (!vocab_json.is_object()) throw file_error(path, "model.vocab is not an object");
    std::vector<AddedToken> added = read_added_tokens(doc, path);
    const size_t tokens = vocab_json.size() + added.size();
    std::unordered_map<std::string, int> vocab = read_vocab(vocab_json, tokens, path);
    int size = 0;
    for (const auto& [token, id] : vocab) size = std::max(size, id + 1);

    const std::vector<MergeIds> merges = read_merges(model, vocab, path);
    t.merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const uint64_t key = static_cast<uint64_t>(merges[rank].left) << 32 | static_cast<uint32_t>(merges[rank].right);
      // A pair listed twice takes its last rank, as in Hugging Face's tokenizers (it collects
      // the merges into a HashMap in order) and transformers.js (a Map built the same way).
      t.merges_.insert_or_assign(key, Merge{static_cast<int>(rank), merges[rank].merged});
    }

    // Added tokens: their ids may extend the vocabulary (Qwen: 151643..151668).
    for (const AddedToken& a : added) {
      if (size_t(a.id) >= id_limit(tokens))
        throw file_error(path, "added_tokens: " + json_quote(a.content) + " has id " + std::to_string(a.id) +
                                   beyond_the_tokens(tokens));
      size = std::max(size, a.id + 1);
    }

    // Every id's raw bytes.
    t.id_bytes_.assign(size, "");
    t.id_present_.assign(size, 0);
    t.id_special_.assign(size, 0);
    t.bytes_to_id_.reserve(size);
    for (const auto& [token, id] : vocab) {
      t.id_bytes_[id] = byte_level_to_bytes(token);
      t.id_present_[id] = 1;
      t.bytes_to_id_.emplace(t.id_bytes_[id], id);
    }
    // The normaliser first: an added token marked "normalized" matches its content's normal form.
    read_normalizer(doc.contains("normalizer") ? doc["normalizer"] : json(), t.normal_forms_, path);
    std::unordered_map<std::string, int> added_id;  // content -> id: one text, one token
    for (const AddedToken& a : added) {
      if (t.id_present_[a.id] && t.id_bytes_[a.id] != a.content)
        throw file_error(path, "added_tokens: duplicate id " + std::to_string(a.id) + " for " + json_quote(a.content) +
                                   " and " + json_quote(t.id_bytes_[a.id]));
      if (const auto [it, fresh] = added_id.emplace(a.content, a.id); !fresh && it->second != a.id)
        throw file_error(path, "added_tokens: " + json_quote(a.content) + " has two ids, " +
                                   std::to_string(it->second) + " and " + std::to_string(a.id) +
                                   " (encode would write one, token_id name the other)");
      AddedTable& table = a.normalized ? t.normalized_added_by_first_byte_ : t.added_by_first_byte_;
      std::string text = a.normalized ? t.normal_form(a.content) : a.content;
      std::vector<AddedMatch>& same_start = table[static_cast<unsigned char>(text[0])];
      if (std::none_of(same_start.begin(), same_start.end(), [&](const AddedMatch& m) { return m.id == a.id; }))
        same_start.push_back({a.id, std::move(text)});
      t.id_bytes_[a.id] = a.content;
      t.id_present_[a.id] = 1;
      t.id_special_[a.id] = a.special;
      t.bytes_to_id_[a.content] = a.id;
    }
    // Longest first, so that matching takes the longest added token at a position.
    for (AddedTable* table : {&t.added_by_first_byte_, &t.normalized_added_by_first_byte_})
      for (auto& matches : *table)
        std::sort(matches.begin(), matches.end(),
                  [](const AddedMatch& x, const AddedMatch& y) { return x.text.size() > y.text.size(); });

    t.byte_id_ = single_byte_ids(vocab);
    read_post_processor(doc.contains("post_processor") ? doc["post_processor"] : json(), t.template_prefix_,
                        t.template_suffix_, path);
    for (const std::vector<int>* ids : {&t.template_prefix_, &t.template_suffix_})
      for (int id : *ids)
        if (id < 0 || id >= size || !t.id_present_[id])
          throw file_error(path, "post_processor: id " + std::to_string(id) + " has no token");
    std::string pattern = read_split_pattern(doc, path);
    if (!pattern.empty()) t.split_ = Regex::compile(pattern, path);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    throw file_error(path, std::string("unexpected JSON: ") + e.what());
  }
  return t;
}

// ---------------------------------------------------------------------------
// Encoding

namespace {

// One Unicode normal form of s, by utf8proc. ASCII text is the same in all forms.
std::string normalize(std::string_view s, int options) {
  if (is_ascii(s)) return std::string(s);
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  if (n < 0) throw Error(std::string("Unicode normalisation failed: ") + utf8proc_errmsg(n));
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

void check_prompt_utf8(std::string_view text) {
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
    throw Error("prompt is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  check_prompt_utf8(text);
  std::vector<int> ids;
  split_on_added(added_by_first_byte_, text, ids, [&](std::string_view piece) { encode_ordinary(piece, ids); });
  return ids;
}

std::vector<int> Tokenizer::with_special_tokens(std::vector<int> ids) const {
  ids.insert(ids.begin(), template_prefix_.begin(), template_prefix_.end());
  ids.insert(ids.end(), template_suffix_.begin(), template_suffix_.end());
  return ids;
}

const Tokenizer::AddedMatch* Tokenizer::match_added(const AddedTable& table, std::string_view text,
                                                    size_t pos) const {
  for (const AddedMatch& m : table[static_cast<unsigned char>(text[pos])]) {
    if (text.substr(pos).starts_with(m.text)) return &m;
  }
  return nullptr;
}

void Tokenizer::split_on_added(const AddedTable& table, std::string_view text, std::vector<int>& out,
                               const std::function<void(std::string_view)>& between) const {
  size_t start = 0;  // text[start, pos) has no added token and is not handed on yet
  for (size_t pos = 0; pos < text.size();) {
    const AddedMatch* m = match_added(table, text, pos);
    if (!m) {
      ++pos;
      continue;
    }
    between(text.substr(start, pos - start));
    out.push_back(m->id);
    pos = start = pos + m->text.size();
  }
  between(text.substr(start));
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int>& out) const {
  if (text.empty()) return;
  // Normalise (NFC for Qwen): "e" + U+0301 becomes "é" before it is split.
  const std::string normalized = normal_form(text);
  // The added tokens matched after normalisation, as encode() matches the others.
  split_on_added(normalized_added_by_first_byte_, normalized, out,
                 [&](std::string_view piece) { encode_words(piece, out); });
}

std::string Tokenizer::normal_form(std::string_view text) const {
  std::string s(text);
  for (int options : normal_forms_) s = normalize(s, options);
  return s;
}

void Tokenizer::encode_words(std::string_view normalized, std::vector<int>& out) const {
  if (normalized.empty()) return;
  // Split into words; each is encoded on its own.
  if (!split_) return encode_word(normalized, out);
  for (std::string_view word : split_->split(normalized)) encode_word(word, out);
}

void Tokenizer::encode_word(std::string_view word, std::vector<int>& out) const {
  bool cacheable = word.size() <= Cache::kMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->words.find(std::string(word));
    if (it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> ids = bpe(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->words.size() >= Cache::kMaxEntries) cache_->words.clear();
    cache_->words.emplace(std::string(word), std::move(ids));
  }
}

// Byte-pair encoding of one word. It starts as one symbol per byte; the adjacent
// pair with the lowest merge rank (the leftmost among equals) is merged into one
// symbol, again and again, until no adjacent pair has a merge. A priority queue
// of candidate pairs makes it O(n log n) instead of rescanning the word each time.
std::vector<int> Tokenizer::bpe(std::string_view word) const {
  // The symbols, as a linked list over the byte positions; merged-away ones get id -1.
  struct Symbol {
    int id, prev, next;
  };
  const int n = static_cast<int>(word.size());
  std::vector<Symbol> symbols(n);
  for (int i = 0; i < n; ++i) {
    unsigned char b = static_cast<unsigned char>(word[i]);
    if (byte_id_[b] < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw file_error(path_, std::string("model.vocab has no token for byte ") + hex);
    }
    symbols[i] = {byte_id_[b], i - 1, i + 1 < n ? i + 1 : -1};
  }

  // A possible merge of symbols[left] and its right neighbour, as they were when queued.
  struct Candidate {
    int rank, left, right, left_id, right_id, merged_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int left) {
    int right = symbols[left].next;
    if (right < 0) return;
    uint64_t key = static_cast<uint64_t>(symbols[left].id) << 32 | static_cast<uint32_t>(symbols[right].id);
    auto it = merges_.find(key);
    if (it != merges_.end())
      queue.push({it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    // Skip candidates made stale by an earlier merge of either symbol.
    if (left.id != c.left_id || left.next != c.right || symbols[c.right].id != c.right_id) continue;
    // Merge: the left symbol becomes the pair, the right one leaves the list.
    left.id = c.merged_id;
    left.next = symbols[c.right].next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    symbols[c.right].id = -1;
    // The merged symbol makes new pairs with both neighbours.
    if (left.prev >= 0) consider(left.prev);
    consider(c.left);
  }

  std::vector<int> ids;
  for (int i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  return ids;
}

// ---------------------------------------------------------------------------
// Decoding

std::string Tokenizer::token_bytes(int id) const {
  if (id < 0 || id >= vocab_size() || !id_present_[id])
    throw file_error(path_, "token id " + std::to_string(id) + " is not in the vocabulary (size " +
                                std::to_string(vocab_size()) + ")");
  return id_bytes_[id];
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  for (int id : ids) text += token_bytes(id);
  return text;
}

std::optional<int> Tokenizer::token_id(std::string_view token) const {
  auto it = bytes_to_id_.find(std::string(token));
  if (it == bytes_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int id) const { return id >= 0 && id < vocab_size() && id_special_[id]; }

std::string StreamDecoder::push(int id) {
  pending_ += tokenizer_->token_bytes(id);
  return take(false);
}

std::string StreamDecoder::flush() { return take(true); }

// The complete characters at the front of pending_; an unfinished one at the end
// stays for the next token unless this is the end. Bad bytes become U+FFFD.
std::string StreamDecoder::take(bool at_end) {
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    int n = utf8_char_length(pending_, i);
    if (n == kIncomplete && !at_end) break;  // wait for the rest of the character
    if (n <= 0) {
      // One U+FFFD for each maximal run of bytes that begins a character and breaks
      // off (Unicode's "maximal subpart"), as Hugging Face's decode writes it (Rust's
      // from_utf8_lossy; Python's "replace" too); a byte that begins none is a run of its own.
      int len = 0;
      out += "\xEF\xBF\xBD";
      i += size_t(std::max(1, utf8_valid_prefix(pending_, i, len)));
      continue;
    }
    out.append(pending_, i, static_cast<size_t>(n));
    i += static_cast<size_t>(n);
  }
  pending_.erase(0, i);
  return out;
}

std::string read_text_file(const std::string& path) {
  std::string text = read_file(path);
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
    throw file_error(path, "not valid UTF-8 (byte offset " + std::to_string(bad) + "): a text file is expected");
  return text;
}

}  // namespace kvscope
