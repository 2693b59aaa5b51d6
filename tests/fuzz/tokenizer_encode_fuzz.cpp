// Fuzz target: the tokenizer on arbitrary bytes, with the tiny models' tokenizer.json.
//
//   encode: kvscope::Error for invalid UTF-8; otherwise decode(encode(text)) gives
//           the text back (exactly, for ASCII text: NFC changes nothing there)
//   decode: the input read as token ids; StreamDecoder must only ever return
//           valid UTF-8, whatever the ids split
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

const kvscope::Tokenizer& tokenizer() {
  static const kvscope::Tokenizer t = kvscope::Tokenizer::load(KVSCOPE_FUZZ_TOKENIZER);
  return t;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool is_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    int len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const unsigned char b = s[i + k];
      if ((b & 0xC0) != 0x80) return false;
      cp = cp << 6 | (b & 0x3F);
    }
    const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : len == 4 ? 0x10000 : 0;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

void round_trip(std::string_view text) {
  try {
    const std::vector<int> ids = tokenizer().encode(text);
    if (is_ascii(text) && tokenizer().decode(ids) != text) std::abort();
  } catch (const kvscope::Error&) {
    if (is_utf8(text)) std::abort();  // valid text must encode (the tiny vocabulary has every byte)
  }
}

void stream_decode(const uint8_t* data, size_t size) {
  kvscope::StreamDecoder stream(tokenizer());
  std::string out;
  for (size_t i = 0; i + 1 < size; i += 2) {
    const int id = data[i] | (data[i + 1] << 8);  // ids past the vocabulary are errors
    try {
      out += stream.push(id % (tokenizer().vocab_size() + 8));
    } catch (const kvscope::Error&) {
    }
  }
  out += stream.flush();
  if (!is_utf8(out)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  round_trip(std::string_view(reinterpret_cast<const char*>(data), size));
  stream_decode(data, size);
  return 0;
}
