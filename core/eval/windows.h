// Held-out windows: the first `length` tokens of every document of a text that has
// that many, as the model reads a prompt (inside the tokenizer's template of special
// tokens, e.g. a BOS first; the bundled model has none). Documents are separated by "<|endoftext|>" (as in
// assets/model/heldout.txt).
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvscope {

// At most max_windows windows (0 = all). kvscope::Error naming the file when no
// document is long enough, ending with `advice` (what the caller's user can lower).
std::vector<std::vector<int>> text_windows(const Tokenizer& tokenizer, const std::string& path, int length,
                                           int max_windows = 0, const std::string& advice = "use a shorter window");

}  // namespace kvscope
