// The numbers a page's prose states, as the doc test reads them (check 2 of
// doc_check.cpp): every one must be a number the page's commands print. What counts
// as a number, and which parts of a line are not prose, is decided here; the unit
// tests (tests/prose_numbers_test.cpp) pin both down.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace kvscope::docs {

inline bool letter(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
inline bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)); }

struct Number {
  std::string text;  // as written: "16,000", "0.875"
  size_t at;         // where it starts in the line
  bool glued;        // part of a word: Qwen3, 0.6B, f32, 16K, sm_90 (not checked)
};

// Numbers as written: 16, 16,000 (thousands), 0.875, 12.0 (a % sign after is not
// part of it; "6.2x faster" is the number 6.2).
inline std::vector<Number> numbers(const std::string& s) {
  std::vector<Number> out;
  for (size_t i = 0; i < s.size();) {
    if (!digit(s[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && digit(s[j])) ++j;
    while (j + 3 < s.size() && s[j] == ',' && digit(s[j + 1]) && digit(s[j + 2]) && digit(s[j + 3]) &&
           (j + 4 >= s.size() || !digit(s[j + 4])))
      j += 4;
    if (j + 1 < s.size() && s[j] == '.' && digit(s[j + 1])) {
      ++j;
      while (j < s.size() && digit(s[j])) ++j;
    }
    const bool left = i > 0 && (letter(s[i - 1]) || s[i - 1] == '.');
    // A trailing "x" is a factor ("6.2x faster"), not a glued letter (2xl, 0x1F).
    const bool x_factor = j < s.size() && s[j] == 'x' && (j + 1 >= s.size() || !(letter(s[j + 1]) || digit(s[j + 1])));
    const bool right = j < s.size() && letter(s[j]) && !x_factor;
    out.push_back({s.substr(i, j - i), i, left || right});
    i = j;
  }
  return out;
}

// The text with every word that holds a '/' (a path, a URL) blanked out.
inline std::string without_paths(std::string s) {
  for (size_t i = 0; i < s.size();) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t j = i;
    while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    if (s.substr(i, j - i).find('/') != std::string::npos) std::fill(s.begin() + i, s.begin() + j, ' ');
    i = j;
  }
  return s;
}

// Prose with what is not prose blanked out: HTML comments, links (text and
// target), words with a '/' (paths), list markers and a heading's chapter number.
// in_comment carries an unclosed "<!--" from one line to the next.
inline std::string prose_only(std::string line, bool& in_comment) {
  std::string out;
  for (size_t i = 0; i < line.size();) {
    if (in_comment) {
      const size_t end = line.find("-->", i);
      if (end == std::string::npos) return out;
      in_comment = false;
      i = end + 3;
    } else if (line.compare(i, 4, "<!--") == 0) {
      in_comment = true;
      i += 4;
    } else {
      out += line[i++];
    }
  }
  // [text](target): both go.
  for (size_t open = 0; (open = out.find('[', open)) != std::string::npos; ++open) {
    const size_t mid = out.find(']', open);
    if (mid == std::string::npos || mid + 1 >= out.size() || out[mid + 1] != '(') continue;
    if (out.find('[', open + 1) < mid) continue;  // "[0, 16) and [4](x)": the link is the second
    const size_t close = out.find(')', mid);
    if (close == std::string::npos) break;
    std::fill(out.begin() + open, out.begin() + close + 1, ' ');
  }
  out = without_paths(out);
  // "1. " list markers and "# 3. Title" / "# Chapter 3" heading numbers.
  size_t k = 0;
  while (k < out.size() && (out[k] == ' ' || out[k] == '#')) ++k;
  const size_t text = out.find_first_not_of(" \t\n\v\f\r");
  const bool heading = text != std::string::npos && out[text] == '#';
  if (heading && out.compare(k, 8, "Chapter ") == 0) k += 8;
  if (k < out.size() && digit(out[k])) {  // the first word, after any '#'s (and "Chapter ")
    size_t j = k;
    while (j < out.size() && digit(out[j])) ++j;
    const bool list_marker = j + 1 < out.size() && out[j] == '.' && out[j + 1] == ' ';
    if (heading || list_marker) std::fill(out.begin() + k, out.begin() + j, ' ');
  }
  return out;
}

}  // namespace kvscope::docs
