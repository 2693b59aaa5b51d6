// Tokenizer: Qwen3's byte-level BPE, read from a Hugging Face tokenizer.json.
//
// encode(text) runs the same steps as the Hugging Face `tokenizers` library:
//   1. added tokens (<|im_start|>, <|endoftext|>, ...) are cut out of the raw text
//      first, leftmost-longest match, and become their ids directly;
//   2. every other piece is normalised (NFC for Qwen);
//   3. split into "words" by the pre-tokenizer regex (Qwen's, run by PCRE2 with its
//      \s spelled out as Unicode's White_Space: spell_out_white_space below);
//   4. each word's UTF-8 bytes become GPT-2 "byte-level" symbols, one per byte;
//   5. BPE: repeatedly merge the adjacent pair with the lowest merge rank.
// decode(ids) concatenates each token's raw bytes.
//
// Steps 2 and 3 use Debian's utf8proc and PCRE2, whose Unicode tables (15 and 14)
// are older than Hugging Face's: characters added since can split differently
// (the README's "tokenizer against the reference encoder" says which).
//
// with_special_tokens(ids) then wraps the ids as the post-processor's template
// says (Hugging Face's add_special_tokens=True). Qwen3's and the bundled model's
// add nothing; Llama 3's, for example, puts its BOS first.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvscope {

class Tokenizer {
 public:
  // Reads a tokenizer.json, or DIR/tokenizer.json when given a directory.
  // kvscope::Error naming the file for malformed JSON, missing fields, a model
  // other than BPE, merges naming unknown tokens, duplicate ids, unsupported steps.
  static Tokenizer load(const std::string& tokenizer_json_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text -> token ids. Added/special tokens written in the text are matched.
  // kvscope::Error("prompt is not valid UTF-8 (byte offset N)") on bad input.
  std::vector<int> encode(std::string_view text) const;

  // ids inside the post-processor's template: prefix + ids + suffix. The template is
  // tokenizer.json's "post_processor" of type TemplateProcessing ("single"), alone
  // or in a Sequence; ByteLevel or none adds nothing.
  std::vector<int> with_special_tokens(std::vector<int> ids) const;
  const std::vector<int>& template_prefix() const { return template_prefix_; }

  // Token ids -> the concatenation of their raw bytes. The result is exactly what
  // was encoded (after NFC) but may be invalid UTF-8 when the ids end or start
  // inside a character; StreamDecoder gives only complete characters.
  // kvscope::Error for an id that has no token.
  std::string decode(const std::vector<int>& ids) const;

  // The raw bytes of one token; an added token is its text, e.g. "<|im_end|>".
  std::string token_bytes(int id) const;

  // One more than the largest id (added tokens included): 151669 for Qwen3.
  int vocab_size() const { return static_cast<int>(id_bytes_.size()); }

  // The id of a token given as text: an added token ("<|im_end|>") or a
  // vocabulary entry written in its raw bytes (" the"); nullopt if none.
  std::optional<int> token_id(std::string_view token) const;

  // True for added tokens marked "special" in tokenizer.json (<|im_end|>, ...).
  bool is_special(int id) const;

  // The path it was loaded from, for messages.
  const std::string& path() const { return path_; }

 private:
  Tokenizer();
  struct Regex;  // a compiled PCRE2 pattern (kept out of this header)
  struct Cache;  // word -> ids, behind a mutex

  // Ids of `text` that holds no raw-matched added token: normalise, then, around the
  // added tokens matched in the normalised text, split and BPE each word.
  void encode_ordinary(std::string_view text, std::vector<int>& out) const;
  // Split and BPE each word of normalised text.
  void encode_words(std::string_view normalized, std::vector<int>& out) const;
  // `text` in the file's normal form (each normaliser step in turn).
  std::string normal_form(std::string_view text) const;
  // BPE of one pre-tokenized word (raw UTF-8 bytes), through the cache.
  void encode_word(std::string_view word, std::vector<int>& out) const;
  std::vector<int> bpe(std::string_view word) const;
  // An added token as matched: its id, and the text it matches (its content; for one
  // matched in the normalised text, its content normalised, as Hugging Face builds it).
  struct AddedMatch {
    int id;
    std::string text;
  };
  using AddedTable = std::array<std::vector<AddedMatch>, 256>;  // by first byte, longest first
  // The longest added token of `table` that starts at text[pos]; nullptr if none.
  const AddedMatch* match_added(const AddedTable& table, std::string_view text, size_t pos) const;
  // `text` cut at the added tokens of `table`, leftmost-longest: each stretch between
  // them goes to `between`, each token's id into `out`, in order.
  void split_on_added(const AddedTable& table, std::string_view text, std::vector<int>& out,
                      const std::function<void(std::string_view)>& between) const;

  std::string path_;
  std::vector<int> normal_forms_;                   // utf8proc options of each normaliser, in order
  std::unique_ptr<Regex> split_;                    // pre-tokenizer pattern; null = no split
  std::unordered_map<std::string, int> bytes_to_id_;  // raw bytes -> id (vocab)
  std::vector<std::string> id_bytes_;               // id -> raw bytes ("" where id_present_ is 0)
  std::vector<char> id_present_;                    // id -> has a token
  std::vector<char> id_special_;                    // id -> special added token
  std::vector<int> template_prefix_, template_suffix_;  // special ids around a text's ids
  std::array<int, 256> byte_id_{};                  // byte -> id of its 1-byte token, -1 if none
  // Merge rank and result for a pair of ids, keyed by (left << 32 | right).
  struct Merge {
    int rank;
    int id;
  };
  std::unordered_map<uint64_t, Merge> merges_;
  // Added tokens, grouped by first byte, longest first, for leftmost-longest matching:
  // those matched in the raw text ("normalized": false, all of Qwen's), and those matched
  // in the normalised text ("normalized": true), as in Hugging Face's tokenizers.
  AddedTable added_by_first_byte_, normalized_added_by_first_byte_;
  std::unique_ptr<Cache> cache_;
};

// Turns ids into text one at a time, as they are generated, returning only whole
// UTF-8 characters: the bytes of a character split across tokens are held back
// until its last byte arrives. Bytes that can never form a character come out as
// U+FFFD, one for each run that begins a character and breaks off (as Hugging Face's
// decode writes them), so everything returned is valid UTF-8.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // Adds one token; returns the characters completed by it (maybe "").
  std::string push(int id);
  // At the end: whatever is still held back (an unfinished character -> one U+FFFD).
  std::string flush();

 private:
  std::string take(bool at_end);

  const Tokenizer* tokenizer_;
  std::string pending_;  // bytes not yet returned
};

// kvscope::Error("prompt is not valid UTF-8 (byte offset N)") unless `text` is UTF-8.
void check_prompt_utf8(std::string_view text);

// A text file to tokenize (eval, heads, calibrate and serve-bench --text): its contents, or
// kvscope::Error "PATH: not valid UTF-8 (byte offset N): ..." naming the file, and
// "PATH: cannot open ..." as read_file.
std::string read_text_file(const std::string& path);

// The split pattern as PCRE2 runs it: \s as Unicode's White_Space, spelled out
// ("[\x{9}-\x{D}\x{20}...]"; inside a class, its ranges), \S as its complement. That
// is what Hugging Face's regex engine (Oniguruma) means by them; PCRE2's own \s also
// takes U+180E, white space before Unicode 6.3. Other escapes, \Q...\E and [:posix:]
// classes are copied as they are. kvscope::Error "PATH: pre_tokenizer regex: \S inside
// a character class is not supported" (Qwen's pattern has none).
std::string spell_out_white_space(const std::string& pattern, const std::string& path);

}  // namespace kvscope
