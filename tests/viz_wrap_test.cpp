// Where the app's text breaks (viz/wrap.h): at spaces only, never inside a number.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "wrap.h"

namespace kvscope::viz {
namespace {

// Lines of `text` as text_wrapped draws them, 10 px a byte: the first line `first`
// px wide (it may follow an item), the others `width`.
std::vector<std::string> lines(const std::string& text, float first, float width) {
  const auto width_of = [](const std::string& s) { return 10.0f * float(s.size()); };
  std::vector<std::string> out;
  size_t i = 0;  // as text_wrapped: spaces at the start stay, at a break they go
  for (float w = first; i != std::string::npos && i < text.size(); w = width) {
    const size_t end = fit_words(text, i, w, width_of);
    out.push_back(text.substr(i, end - i));
    i = text.find_first_not_of(' ', end);
  }
  return out;
}

// ImGui's wrapping split "12.0%" after its '.', and "1,000" after its ','.
TEST(VizWrap, NumbersAreNeverSplit) {
  const std::string header = "880 blocks in use  |  freed 12.0% of a full cache's 1,000 blocks";
  EXPECT_EQ(lines(header, 220, 300), (std::vector<std::string>{"880 blocks in use  |", "freed 12.0% of a full cache's",
                                                               "1,000 blocks"}));
  EXPECT_EQ(lines(header, 1000, 1000), std::vector<std::string>{header});
  for (float width = 80; width <= 600; width += 10)
    for (const std::string& line : lines(header, width, width)) {
      EXPECT_NE(line.back(), '.') << width;
      EXPECT_NE(line.back(), ',') << width;
      EXPECT_LE(10.0f * float(line.size()), width) << line;  // every word here is at most 70 px wide
    }
}

// A word wider than the line has a line of its own; no-break spaces hold words
// together ("moved 230 MB" in the pool's header); runs of spaces stay inside a line
// and at its start, not at a break.
TEST(VizWrap, LongWordsAndNoBreakSpaces) {
  EXPECT_EQ(lines("a verylongword b", 50, 50), (std::vector<std::string>{"a", "verylongword", "b"}));
  const std::string nbsp = "\xc2\xa0";
  EXPECT_EQ(lines("end  |  moved" + nbsp + "230" + nbsp + "MB", 100, 100),
            (std::vector<std::string>{"end  |", "moved" + nbsp + "230" + nbsp + "MB"}));
  EXPECT_EQ(lines(" 880 blocks", 1000, 1000), std::vector<std::string>{" 880 blocks"});  // after a title
  EXPECT_EQ(lines(" 880 blocks", 45, 45), (std::vector<std::string>{" 880", "blocks"}));
  EXPECT_EQ(lines("  a  b  ", 1000, 1000), std::vector<std::string>{"  a  b"});
}

// A run exactly as wide as the line fits on it.
TEST(VizWrap, ARunExactlyTheLinesWidthFits) {
  EXPECT_EQ(lines("ab cd ef", 50, 50), (std::vector<std::string>{"ab cd", "ef"}));
  EXPECT_EQ(lines("ab cd ef", 49, 49), (std::vector<std::string>{"ab", "cd", "ef"}));
}

}  // namespace
}  // namespace kvscope::viz
