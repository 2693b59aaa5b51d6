// The app's colours (viz/palette.h): what the legend calls each sequence colour.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "palette.h"

namespace kvscope::viz {
namespace {

TEST(VizPalette, TheLegendNamesEverySequenceThatSharesAColour) {
  ASSERT_EQ(palette::kOwnerColours, 4);
  // As many sequences as colours, or fewer: one name each.
  EXPECT_EQ(palette::owners_label(0, 1), "seq 0");
  EXPECT_EQ(palette::owners_label(3, 4), "seq 3");
  // More: the colours repeat, and the legend says which sequences share one (it
  // once showed 12 swatches, "seq 0" to "seq 11", in 4 colours).
  EXPECT_EQ(palette::owners_label(1, 6), "seq 1, 5");
  EXPECT_EQ(palette::owners_label(2, 6), "seq 2");
  EXPECT_EQ(palette::owners_label(0, 12), "seq 0, 4, 8");
  EXPECT_EQ(palette::owners_label(3, 12), "seq 3, 7, 11");
  EXPECT_EQ(palette::owners_label(0, 13), "seq 0, 4, 8, \xe2\x80\xa6");  // seq 12 as well
  EXPECT_EQ(palette::owners_label(1, 13), "seq 1, 5, 9");
  // Sequence k + 4 is drawn in the colour of sequence k, and the four differ.
  EXPECT_EQ(palette::owner(5), palette::owner(1));
  EXPECT_EQ(std::set<uint32_t>(palette::kOwner, palette::kOwner + palette::kOwnerColours).size(), 4u);
}

// A token the policy has not scored yet (written since its last round) once took
// 85% of its owner's colour: high on the scale the legend reads as "brighter =
// higher score". It is now greyed, off that scale, and named in the legend.
int squared_distance(uint32_t a, uint32_t b) {
  int d = 0;
  for (int shift : {0, 8, 16}) {
    const int x = int((a >> shift) & 0xFF) - int((b >> shift) & 0xFF);
    d += x * x;
  }
  return d;
}

TEST(VizPalette, ATokenNotScoredYetIsOffTheScoreScale) {
  // The same colour computed in two places may differ by one in a channel: a
  // compiler may fuse x * k + 0.5 into one rounding in one place and not the other
  // (the sanitizer build did).
  for (int seq = 0; seq < palette::kOwnerColours; ++seq) {
    EXPECT_LE(squared_distance(palette::token(seq, std::nullopt, true), palette::unscored(seq)), 3);
    EXPECT_LE(squared_distance(palette::token(seq, std::nullopt, false), palette::live(seq, 0, false)), 3);  // no scores
    EXPECT_LE(squared_distance(palette::token(seq, 0.5f, true), palette::live(seq, 0.5f, true)), 3);
    for (int i = 0; i <= 7; ++i)  // farther from every shade than --verify's tolerance (12 a channel)
      EXPECT_GT(squared_distance(palette::unscored(seq), palette::live(seq, float(i) / 7, true)), 3 * 12 * 12)
          << "seq " << seq << ", shade " << i;
  }
}

// The sequence strip's four token states, told apart at a glance: a token released
// with its served request was once drawn as evicted (struck through, the policy's red)
// although the policy never chose it. Each pair at least 40 apart in RGB.
TEST(VizPalette, TheStripsTokenStatesHaveTheirOwnColours) {
  std::vector<uint32_t> states = {palette::kSeqFuture, palette::kSeqEvicted, palette::kSeqReleased};
  for (int seq = 0; seq < palette::kOwnerColours; ++seq) states.push_back(palette::live(seq, 0, false));
  for (size_t i = 0; i < states.size(); ++i)
    for (size_t j = i + 1; j < states.size(); ++j)
      EXPECT_GT(squared_distance(states[i], states[j]), 40 * 40) << "states " << i << " and " << j;
}

}  // namespace
}  // namespace kvscope::viz
