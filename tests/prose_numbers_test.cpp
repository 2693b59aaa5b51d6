// What the doc test takes for a number in a page's prose (tutorials/prose_numbers.h):
// a number it misses is one a sentence can keep quoting after the program stops
// printing it; a number it invents fails a page that is right.
#include "prose_numbers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvscope::docs {
namespace {

// The numbers of s that the doc test checks (not glued to a word), as written.
std::vector<std::string> checked(const std::string& s) {
  std::vector<std::string> out;
  for (const Number& n : numbers(s))
    if (!n.glued) out.push_back(n.text);
  return out;
}

// Every number of s, glued or not, as "text@at" or "text@at glued".
std::vector<std::string> all(const std::string& s) {
  std::vector<std::string> out;
  for (const Number& n : numbers(s)) out.push_back(n.text + "@" + std::to_string(n.at) + (n.glued ? " glued" : ""));
  return out;
}

using Strings = std::vector<std::string>;

TEST(ProseNumbers, ThousandsSeparatorsBelongToTheNumber) {
  EXPECT_EQ(checked("16,000 tokens in 1,048,576 slots"), (Strings{"16,000", "1,048,576"}));
  // Only groups of exactly three digits: "1,23" and "1,2345" are two numbers each.
  EXPECT_EQ(checked("1,23 and 1,2345"), (Strings{"1", "23", "1", "2345"}));
  // A comma and a space is a list, not a separator.
  EXPECT_EQ(checked("16, 32, 64"), (Strings{"16", "32", "64"}));
  // A group at the very end of the line still counts.
  EXPECT_EQ(checked("about 4,096"), (Strings{"4,096"}));
}

TEST(ProseNumbers, ADecimalPointNeedsADigitAfterIt) {
  EXPECT_EQ(checked("0.875 of the blocks, 12.0 GB"), (Strings{"0.875", "12.0"}));
  // A full stop ends the sentence, not the number.
  EXPECT_EQ(checked("it frees 12."), (Strings{"12"}));
  EXPECT_EQ(checked("16,384.5 keys"), (Strings{"16,384.5"}));
}

TEST(ProseNumbers, APercentSignAndAFactorAreNotPartOfTheNumber) {
  EXPECT_EQ(checked("87.5% evicted, 6.2x faster, 3x"), (Strings{"87.5", "6.2", "3"}));
  // An "x" that starts a longer word is a glued letter: 2xl, and the hex 0x1F.
  EXPECT_EQ(all("2xl 3x. 0x1F"), (Strings{"2@0 glued", "3@4", "0@8 glued", "1@10 glued"}));
}

TEST(ProseNumbers, DigitsGluedToAWordAreNotChecked) {
  EXPECT_EQ(all("Qwen3 0.6B f32 16K sm_90 v1.2"),
            (Strings{"3@4 glued", "0.6@6 glued", "32@12 glued", "16@15 glued", "90@22 glued", "1.2@26 glued"}));
  // After a full stop that is not a decimal point ("see .5"), too.
  EXPECT_EQ(all("see .5 and 5"), (Strings{"5@5 glued", "5@11"}));
  EXPECT_TRUE(checked("").empty());
}

TEST(ProseNumbers, PathsAreBlankedWordByWord) {
  EXPECT_EQ(without_paths("run build/tutorials/03-evict 16 times"), "run " + std::string(24, ' ') + " 16 times");
  EXPECT_EQ(without_paths("  a/1\tb 2/3"), "     \tb    ");
}

std::string prose(const std::string& line) {
  bool in_comment = false;
  return prose_only(line, in_comment);
}

TEST(ProseNumbers, PathsInProseAreNotNumbers) {
  EXPECT_EQ(checked(prose("run tutorials/03-evict-87-reclaim-12 5 times")), (Strings{"5"}));
}

TEST(ProseNumbers, LinksLoseTextAndTarget) {
  EXPECT_EQ(checked(prose("see [chapter 3](../03-x/README.md) for 12 blocks")), (Strings{"12"}));
  // Brackets that are not a link stay prose, also before a link on the same line.
  EXPECT_EQ(checked(prose("slots [0, 16) and [4] (5)")), (Strings{"0", "16", "4", "5"}));
  EXPECT_EQ(checked(prose("slots [0, 16) and [chapter 4](../04/README.md)")), (Strings{"0", "16"}));
  // A link left open is not blanked.
  EXPECT_EQ(checked(prose("[7](open")), (Strings{"7"}));
}

TEST(ProseNumbers, HtmlCommentsAreBlankedAcrossLines) {
  bool in_comment = false;
  EXPECT_EQ(checked(prose_only("1 <!-- 2 --> 3", in_comment)), (Strings{"1", "3"}));
  EXPECT_FALSE(in_comment);
  EXPECT_EQ(checked(prose_only("4 <!-- 5", in_comment)), (Strings{"4"}));
  EXPECT_TRUE(in_comment);
  EXPECT_EQ(checked(prose_only("6 still a comment", in_comment)), Strings{});
  EXPECT_TRUE(in_comment);
  EXPECT_EQ(checked(prose_only("7 --> 8 <!-- 9 --> 10", in_comment)), (Strings{"8", "10"}));
  EXPECT_FALSE(in_comment);
}

TEST(ProseNumbers, ListMarkersAndChapterNumbersAreNotNumbers) {
  EXPECT_EQ(checked(prose("1. evict 87 tokens")), (Strings{"87"}));
  EXPECT_EQ(checked(prose("   12. then 3")), (Strings{"3"}));
  // Only a line that opens with the number is a numbered list: after a bullet it is prose.
  EXPECT_EQ(checked(prose("- 16 blocks")), (Strings{"16"}));
  EXPECT_EQ(checked(prose("- 2. the second")), (Strings{"2"}));
  EXPECT_EQ(checked(prose("# 3. Evict 87, reclaim 12")), (Strings{"87", "12"}));
  EXPECT_EQ(checked(prose("## Chapter 9: the GPU")), Strings{});
  // A number that opens a sentence is not a list marker, nor is one later in the line.
  EXPECT_EQ(checked(prose("16 tokens. 2. next")), (Strings{"16", "2"}));
  EXPECT_EQ(checked(prose("1.5 GB")), (Strings{"1.5"}));
  EXPECT_EQ(checked(prose("7.")), (Strings{"7"}));  // no space after: the end of a sentence
}

}  // namespace
}  // namespace kvscope::docs
