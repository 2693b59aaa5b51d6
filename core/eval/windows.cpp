#include "eval/windows.h"

#include "util/error.h"

namespace kvscope {

std::vector<std::vector<int>> text_windows(const Tokenizer& tokenizer, const std::string& path, int length,
                                           int max_windows, const std::string& advice) {
  const std::string text = read_text_file(path);
  const std::string separator = "<|endoftext|>";
  std::vector<std::vector<int>> windows;
  int documents = 0;
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find(separator, begin);
    if (end == std::string::npos) end = text.size();
    const std::string doc = text.substr(begin, end - begin);
    begin = end + separator.size();
    if (doc.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    ++documents;
    std::vector<int> ids = tokenizer.with_special_tokens(tokenizer.encode(doc));  // a BOS first, if the template has one
    if (int(ids.size()) < length) continue;
    ids.resize(size_t(length));
    windows.push_back(std::move(ids));
    if (max_windows > 0 && int(windows.size()) == max_windows) break;
  }
  if (documents == 0) throw file_error(path, "holds no text (documents are separated by " + separator + ")");
  if (windows.empty())
    throw file_error(path, (documents == 1 ? "its one document is" : "each of its " + std::to_string(documents) +
                                                                        " documents is") +
                               " shorter than " + std::to_string(length) + " tokens; " + advice);
  return windows;
}

}  // namespace kvscope
