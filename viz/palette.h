// Palette: every colour the app draws with, in one place. The legend
// (draw_controls.cpp) lists these same constants, and --verify classifies the
// pixels of a screenshot by them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cache/kv_cache.h"

namespace kvscope::viz::palette {

// 0xAABBGGRR, as ImGui's IM_COL32 packs it.
constexpr uint32_t rgb(int r, int g, int b, int a = 255) {
  return uint32_t(a) << 24 | uint32_t(b) << 16 | uint32_t(g) << 8 | uint32_t(r);
}

constexpr uint32_t kBackground = rgb(24, 26, 31);
constexpr uint32_t kPanel = rgb(32, 35, 41);
constexpr uint32_t kFree = rgb(58, 62, 72);        // a free block's slots
constexpr uint32_t kHole = rgb(170, 52, 50);       // an empty slot in a block still in use: memory held for nothing
constexpr uint32_t kRoom = rgb(84, 96, 120);       // a slot of a block in use not written yet (the tail's room)
constexpr uint32_t kWritten = rgb(255, 255, 255);  // just written (fades)
constexpr uint32_t kEvicted = rgb(255, 120, 90);   // just evicted (fades into the hole colour)
constexpr uint32_t kMoving = rgb(255, 176, 48);    // a survivor sliding forward
constexpr uint32_t kFreedEdge = rgb(235, 235, 235);  // outline of a block just given back to the pool
constexpr uint32_t kHighlight = rgb(255, 236, 64); // the token under the mouse, in every view
constexpr uint32_t kText = rgb(225, 228, 235);
constexpr uint32_t kTextDim = rgb(140, 146, 158);
constexpr uint32_t kGrid = rgb(60, 64, 74);
constexpr uint32_t kSeqEvicted = rgb(96, 40, 40);  // sequence view: a token the policy dropped
constexpr uint32_t kSeqReleased = rgb(108, 108, 100);  // sequence view: gone with its request (done or preempted)
constexpr uint32_t kSeqFuture = rgb(40, 43, 50);   // sequence view: not written yet

// Live slots take their sequence's colour (a block's owner), shaded by score.
constexpr int kOwnerColours = 4;
constexpr uint32_t kOwner[kOwnerColours] = {rgb(70, 150, 245), rgb(60, 200, 170), rgb(185, 120, 240), rgb(225, 200, 80)};
inline uint32_t owner(int seq) { return kOwner[(seq % kOwnerColours + kOwnerColours) % kOwnerColours]; }
// The legend's name for colour k among `sequences`: "seq 1", or, when there are
// more sequences than colours, the ones that share it: "seq 1, 5, 9", and from a
// fourth on "seq 1, 5, 9, …".
inline std::string owners_label(int k, int sequences) {
  std::string label = "seq " + std::to_string(k);
  int named = 1;
  for (int seq = k + kOwnerColours; seq < sequences; seq += kOwnerColours, ++named) {
    if (named == 3) return label + ", \xe2\x80\xa6";
    label += ", " + std::to_string(seq);
  }
  return label;
}

// Chart lines, by memory strategy.
inline uint32_t strategy(MemoryStrategy s) {
  switch (s) {
    case MemoryStrategy::HolesOnly: return rgb(240, 110, 90);
    case MemoryStrategy::ReuseHoles: return rgb(235, 190, 70);
    case MemoryStrategy::Compact: return rgb(90, 215, 120);
  }
  return kText;
}
// The right view's colour when both views share a strategy (two traces, say).
constexpr uint32_t kSecondRun = rgb(120, 180, 255);
constexpr uint32_t kEvictedLine = rgb(200, 205, 215);
// The law f^block_size, drawn over the line it predicts (holes only, of the same
// hue): a colour of its own, or a measurement on the law hides it.
constexpr uint32_t kExpectedLine = rgb(235, 140, 230, 230);

// Scales a colour's brightness (0 .. 1), keeping alpha.
inline uint32_t shade(uint32_t c, float k) {
  auto ch = [&](int shift) { return uint32_t(float((c >> shift) & 0xFF) * k + 0.5f) & 0xFF; };
  return (c & 0xFF000000u) | ch(16) << 16 | ch(8) << 8 | ch(0);
}
// Mixes a toward b by t (0 .. 1).
inline uint32_t mix(uint32_t a, uint32_t b, float t) {
  auto ch = [&](int shift) {
    const float x = float((a >> shift) & 0xFF), y = float((b >> shift) & 0xFF);
    return uint32_t(x + (y - x) * t + 0.5f) & 0xFF;
  };
  return ch(24) << 24 | ch(16) << 16 | ch(8) << 8 | ch(0);
}
inline uint32_t alpha(uint32_t c, float a) { return (c & 0x00FFFFFFu) | uint32_t(a * 255.0f + 0.5f) << 24; }

// A live slot: its owner's colour, from 45% (lowest score) to 100% (highest);
// 85% in a run without scores. Shades are quantised to 8 levels.
inline uint32_t live(int seq, float score01, bool known) {
  if (!known) return shade(owner(seq), 0.85f);
  const float q = float(int(score01 * 7.0f + 0.5f)) / 7.0f;
  return shade(owner(seq), 0.45f + 0.55f * q);
}
// A live token not scored yet in a run that has scores (written since the policy's
// last round): its owner's colour greyed, off the scale, so it does not read as a
// high score.
inline uint32_t unscored(int seq) { return mix(owner(seq), rgb(150, 150, 150), 0.6f); }
// A live token as the pool and the sequence draw it: by its score's shade (0 .. 1)
// when it has one; greyed when the run scores tokens but not yet this one.
inline uint32_t token(int seq, std::optional<float> shade01, bool run_has_scores) {
  if (shade01) return live(seq, *shade01, true);
  return run_has_scores ? unscored(seq) : live(seq, 0, false);
}

}  // namespace kvscope::viz::palette
