// util/format.h: the numbers of the app's screen and of the command-line tables.
#include "util/format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "util/error.h"  // number_text

namespace kvscope {
namespace {

TEST(Format, CommasEveryThreeDigits) {
  EXPECT_EQ(commas(0), "0");
  EXPECT_EQ(commas(999), "999");
  EXPECT_EQ(commas(1000), "1,000");
  EXPECT_EQ(commas(16000), "16,000");
  EXPECT_EQ(commas(32762123264), "32,762,123,264");
  EXPECT_EQ(commas(-1234567), "-1,234,567");
  EXPECT_EQ(commas(std::numeric_limits<int64_t>::min()), "-9,223,372,036,854,775,808");
}

TEST(Format, PluralTakesAnSUnlessTheCountIsOne) {
  EXPECT_EQ(plural(1, "block"), "1 block");
  EXPECT_EQ(plural(0, "block"), "0 blocks");
  EXPECT_EQ(plural(2, "run"), "2 runs");
  EXPECT_EQ(plural(16000, "token"), "16000 tokens");
  EXPECT_EQ(plural(-1, "step"), "-1 steps");
}

TEST(Format, AnBeforeTheNumbersThatAreReadWithAVowel) {
  for (const char* n : {"8", "80", "8.5", "800", "8000", "11", "18", "11.5", "11000", "18000", "11000000", "8e+06"})
    EXPECT_STREQ(a_or_an(n), "an") << n;
  for (const char* n : {"1", "24", "0.5", "0.001", "110", "180", "1100", "1800", "111", "1.8", "1e+06", "16"})
    EXPECT_STREQ(a_or_an(n), "a") << n;
}

// number_text: whole numbers in full (a limit reads "1000000000", not "1e+09"),
// the rest as %g; NaN and numbers past an int64 are not cast.
TEST(Format, NumberTextQuotesWholeNumbersInFull) {
  EXPECT_EQ(number_text(1e9), "1000000000");
  EXPECT_EQ(number_text(-1), "-1");
  EXPECT_EQ(number_text(0), "0");
  EXPECT_EQ(number_text(0.875), "0.875");
  EXPECT_EQ(number_text(1e15), "1e+15");
  EXPECT_EQ(number_text(1e300), "1e+300");
  EXPECT_EQ(number_text(std::nan("")), "nan");
}

TEST(Format, ParameterCountsInMillionsOrBillions) {
  EXPECT_EQ(params_text(76032), "0.08M");
  EXPECT_EQ(params_text(1312128), "1.31M");     // the bundled model
  EXPECT_EQ(params_text(99999999), "100.00M");  // just under the switch
  EXPECT_EQ(params_text(100000000), "0.10B");
  EXPECT_EQ(params_text(596049920), "0.60B");   // Qwen3-0.6B
  EXPECT_EQ(params_text(32762123264), "32.76B");  // Qwen3-32B
}

TEST(Format, KibExactOrWithTwoDecimals) {
  EXPECT_EQ(kib(229376), "224 KiB");
  EXPECT_EQ(kib(256), "0.25 KiB");
  EXPECT_EQ(kib(2304), "2.25 KiB");
  EXPECT_EQ(kib(0), "0 KiB");
}

TEST(Format, BytesInDecimalUnitsWithThreeSignificantDigits) {
  EXPECT_EQ(bytes(0), "0 B");
  EXPECT_EQ(bytes(999), "999 B");
  EXPECT_EQ(bytes(1000), "1.00 kB");
  EXPECT_EQ(bytes(65536), "65.5 kB");
  EXPECT_EQ(bytes(433e6), "433 MB");
  EXPECT_EQ(bytes(3.67e9), "3.67 GB");
  EXPECT_EQ(bytes(-1920), "-1.92 kB");
  // Rounded to three digits before the unit is chosen: never "1000 MB" or "10.00 GB".
  EXPECT_EQ(bytes(999.6), "1.00 kB");
  EXPECT_EQ(bytes(999.6e6), "1.00 GB");
  EXPECT_EQ(bytes(9.996e9), "10.0 GB");
  EXPECT_EQ(bytes(99.96e3), "100 kB");
  EXPECT_EQ(bytes(999.4e6), "999 MB");
}

TEST(Format, PercentAndNotANumber) {
  EXPECT_EQ(percent(0.8751), "87.5%");
  EXPECT_EQ(percent(0.12, 0), "12%");
  EXPECT_EQ(percent(1), "100.0%");
  EXPECT_EQ(percent(std::nan("")), "-");
}

}  // namespace
}  // namespace kvscope
