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
// objects at once, counting outside strings. Anything else passes, for the parser to
// say what is wrong with it: a text that does not start as JSON's arrays and objects
// do (a binary file, whose bytes would count as brackets) is not scanned at all.
inline void check_json_depth(std::string_view text, const std::string& source) {
  const size_t bom = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;  // a UTF-8 byte order mark, which nlohmann skips
  const size_t first = text.find_first_not_of(" \t\r\n", bom);
  if (first == std::string_view::npos || (text[first] != '{' && text[first] != '[')) return;
  int depth = 0;
  bool in_string = false;
  for (size_t i = first; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character, a quote included
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw file_error(source, "JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels deep (at byte " +
                                     std::to_string(i) + ")");
    } else if ((c == ']' || c == '}') && --depth == 0) {
      return;  // the value is closed: what follows is the parser's to judge
    }
  }
}

}  // namespace kvscope
