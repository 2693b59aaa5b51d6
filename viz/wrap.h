// Where a line of text breaks: at spaces only. No drawing here (text_wrapped in
// draw_controls.cpp draws each line), so the rule is tested without a window.
//
// ImGui 1.86's own wrapping also breaks after '.' and ',': at a view's width the
// header read "12." on one line and "0% of the full cache's" on the next.
#pragma once

#include <functional>
#include <string>

namespace kvscope::viz {

// The end of the longest run of whole words of `text` from `from` whose width fits
// in `width`: at least one word, even one wider than that. The run ends before a
// space, or at the end of the text; spaces at `from` are part of it. A no-break
// space (U+00A0) is part of a word.
inline size_t fit_words(const std::string& text, size_t from, float width,
                        const std::function<float(const std::string&)>& width_of) {
  const size_t word = text.find_first_not_of(' ', from);
  if (word == std::string::npos) return text.size();
  size_t end = text.find(' ', word);
  if (end == std::string::npos) return text.size();
  while (end < text.size()) {
    size_t next = text.find_first_not_of(' ', end);  // the words after these spaces
    if (next == std::string::npos) return end;       // only spaces left
    next = text.find(' ', next);
    if (next == std::string::npos) next = text.size();
    if (width_of(text.substr(from, next - from)) > width) return end;
    end = next;
  }
  return end;
}

}  // namespace kvscope::viz
