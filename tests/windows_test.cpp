// eval/windows.h: held-out windows, the first `length` tokens of each document
// of a text long enough, with the bundled model's tokenizer (no BOS).
#include "eval/windows.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvscope {
namespace {

class Windows : public ::testing::Test {
 protected:
  const Tokenizer tokenizer = Tokenizer::load(test::source_path("assets/model/tokenizer.json"));
  const std::string path = test::binary_path("windows_test_" + std::to_string(getpid()) + ".txt");

  void TearDown() override { std::remove(path.c_str()); }

  std::string write(const std::string& text) {
    std::ofstream(path) << text;
    return path;
  }

  // The message text_windows refuses with, or "" when it does not.
  std::string refusal(int length) {
    try {
      text_windows(tokenizer, path, length);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

const std::string kLong = "The json module encodes Python objects as JSON text and decodes them back.";
const std::string kShort = "A dict.";

TEST_F(Windows, EachLongEnoughDocumentGivesItsFirstTokens) {
  const int length = 8;
  ASSERT_GE(tokenizer.encode(kLong).size(), size_t(length));
  ASSERT_LT(tokenizer.encode(kShort).size(), size_t(length));
  // Blank documents are skipped, short ones too; the long one comes twice.
  write(kLong + "<|endoftext|>\n\n<|endoftext|>" + kShort + "<|endoftext|>" + kLong);
  const auto windows = text_windows(tokenizer, path, length);
  ASSERT_EQ(windows.size(), 2u);
  std::vector<int> first = tokenizer.encode(kLong);
  first.resize(size_t(length));
  EXPECT_EQ(windows[0], first);
  EXPECT_EQ(windows[1], first);
  EXPECT_EQ(text_windows(tokenizer, path, length, /*max_windows=*/1).size(), 1u);
}

TEST_F(Windows, NoDocumentLongEnoughIsAnErrorNamingTheFile) {
  write(kShort);
  EXPECT_EQ(refusal(64), path + ": its one document is shorter than 64 tokens; use a shorter window");
  write(kShort + "<|endoftext|>" + kShort);
  EXPECT_EQ(refusal(64), path + ": each of its 2 documents is shorter than 64 tokens; use a shorter window");
  write(" \n<|endoftext|>\n");
  EXPECT_EQ(refusal(64), path + ": holds no text (documents are separated by <|endoftext|>)");
}

}  // namespace
}  // namespace kvscope
