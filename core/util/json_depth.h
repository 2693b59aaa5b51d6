// How deep a JSON text nests, checked before it is parsed. nlohmann parses any
// depth, but copying or printing a value recurses once per level: a config.json
// whose eos_token_id was 100,000 arrays deep overflowed the stack (SIGSEGV) while
// its error message printed the value. No file kvscope reads nests more than a few
// levels (tokenizer.json: 5).
#pragma once

#include <string>
#include <string_view>

#include "util/error.h"

namespace kvscope {

constexpr int kMaxJsonDepth = 64;

// kvscope::Error naming `source` when `text` opens more than kMaxJsonDepth arrays or
// objects at once, counting outside strings. Invalid JSON otherwise passes: the
// parser says what is wrong with it.
inline void check_json_depth(std::string_view text, const std::string& source) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character, a quote included
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw file_error(source, "JSON nested more than " + std::to_string(kMaxJsonDepth) +
                                     " levels deep (at byte " + std::to_string(i) + "), deeper than any file kvscope reads");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace kvscope
