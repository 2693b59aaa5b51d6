// Fuzz target: a tokenizer.json file. Loading either gives a tokenizer that can
// encode a short text as a prompt (inside its template's special tokens), or
// throws kvscope::Error; anything else is a bug.
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kvscope::fuzz::input_file(data, size, "tokenizer.json");
  try {
    const kvscope::Tokenizer t = kvscope::Tokenizer::load(path);
    const std::vector<int> ids = t.with_special_tokens(t.encode("Hello, world! <|im_end|> 123 \xC3\xA9t\xC3\xA9\n"));
    (void)t.decode(ids);
  } catch (const kvscope::Error&) {
  }
  return 0;
}
