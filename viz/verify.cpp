// --verify: the screenshot against the cache state it should show.
//
// Every slot of every pool view is read back from the frame's pixels (its
// centre pixel) and classified by the palette: free, live (any owner's colour
// at any shade), hole or unwritten room. The expected class comes from the replayed Occupancy
// of that view (Timeline::slot_state, which the drawing code reads too: --verify checks the
// colours and places drawn; the classification itself is tested in tests/viz_timeline_test.cpp,
// and VerifyPicture in tests/viz_app/app_test.cpp paints slots without slot_state). Any slot that disagrees is reported.
// A slot that flashes (an event of the last moment, fading: slot_flashes) is read
// with its flash blended off. One under a tooltip or the outline of the token under
// the mouse (--mouse) is counted and not checked; a view where no slot could be read
// fails. A view whose compaction is sliding in the frame is named and not checked (a
// frame where every view slides fails: nothing was checked). While playing, the
// sequence strip's text must show the newest written token it scrolled to, inside the
// picture.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "app.h"
#include "palette.h"
#include "util/format.h"

namespace kvscope::viz {

namespace {

enum Class { kFreeSlot, kLiveSlot, kHoleSlot, kRoomSlot, kUnknown };
const char* kClassNames[] = {"free", "live", "hole", "room", "unrecognised"};

Class class_of(SlotState state) {
  switch (state) {
    case SlotState::Free: return kFreeSlot;
    case SlotState::Live: return kLiveSlot;
    case SlotState::Hole: return kHoleSlot;
    case SlotState::Room: return kRoomSlot;
  }
  return kUnknown;
}

using Rgb = std::array<float, 3>;

float channel(uint32_t c, int i) { return float((c >> (8 * i)) & 0xFF); }  // 0xAABBGGRR: i = 0 red, 1 green, 2 blue

float distance(const Rgb& p, uint32_t c) {
  float d = 0;
  for (int i = 0; i < 3; ++i) d += (p[size_t(i)] - channel(c, i)) * (p[size_t(i)] - channel(c, i));
  return d;
}

// A slot's colour under the flash drawn over it, blended off as ImGui blended it on
// (pixel = a * flash + (1 - a) * below). A flash is at most 0.85 strong: 15% of the
// pixel is the slot's colour, and blending off magnifies the pixel's rounding (half a
// unit) at most 6.7 times, within classify's tolerance. A slot has one flash at most
// (slot_flashes).
Rgb under_flash(const uint8_t* pixel, uint32_t flash) {
  const float a = channel(flash, 3) / 255;
  Rgb p;
  for (int i = 0; i < 3; ++i) p[size_t(i)] = (float(pixel[i]) - a * channel(flash, i)) / (1 - a);
  return p;
}

Class classify(const Rgb& p) {
  float best = INFINITY;
  Class out = kUnknown;
  auto consider = [&](uint32_t c, Class k) {
    const float d = distance(p, c);
    if (d < best) best = d, out = k;
  };
  consider(palette::kFree, kFreeSlot);
  consider(palette::kHole, kHoleSlot);
  consider(palette::kRoom, kRoomSlot);
  for (int seq = 0; seq < palette::kOwnerColours; ++seq) {
    consider(palette::live(seq, 0, false), kLiveSlot);
    consider(palette::unscored(seq), kLiveSlot);
    for (int i = 0; i <= 7; ++i) consider(palette::live(seq, float(i) / 7, true), kLiveSlot);
  }
  return best <= 3 * 12 * 12 ? out : kUnknown;
}

// One pool view's slots against its replayed occupancy: a line of the report, and ok
// false on any mismatch, or when the slots cannot be read back at this size or none was.
std::string verify_pool(const PoolGeometry& g, const Timeline& t, const std::vector<SlotFlash>& flashes,
                        const std::vector<App::Rect>& covers, const std::string& name,
                        const std::vector<uint8_t>& rgba, int width, int height, bool& ok) {
  const Occupancy& occ = t.occupancy();
  if (!g.drawn || g.slot_w < 2 || g.slot_h < 2) {
    ok = false;
    return "verify: " + name + ": the slots are too small to read back at this size (use a larger --size)\n";
  }
  // A slot past the picture's edge is not a rendering fault: the window is too small.
  bool fits = true;
  for (int b = 0; b < occ.num_blocks(); ++b) {
    const ImVec2 a = g.slot_min(b, 0), z = g.slot_max(b, occ.block_size() - 1);
    fits &= a.x >= 0 && a.y >= 0 && z.x <= float(width) && z.y <= float(height);
  }
  if (!fits) {
    ok = false;
    return "verify: " + name + ": the pool does not fit the " + std::to_string(width) + "x" +
           std::to_string(height) + " picture (use a larger --size)\n";
  }
  std::map<std::pair<int, int>, uint32_t> flashed;  // (block, slot) -> its flash
  for (const SlotFlash& f : flashes) flashed[{f.block, f.slot}] = f.colour;
  int64_t expected[5] = {}, seen[5] = {}, wrong = 0;
  int64_t through = 0, covered = 0;  // slots read through flashes, not read under a tooltip
  std::string first;
  for (int b = 0; b < occ.num_blocks(); ++b)
    for (int j = 0; j < occ.block_size(); ++j) {
      const ImVec2 a = g.slot_min(b, j), z = g.slot_max(b, j);
      const int x = int((a.x + z.x) / 2), y = int((a.y + z.y) / 2);
      const Class want = class_of(t.slot_state(b, j));
      ++expected[want];
      const auto under = [&](const App::Rect& r) {
        return x >= r.min.x && x < r.max.x && y >= r.min.y && y < r.max.y;
      };
      if (std::any_of(covers.begin(), covers.end(), under)) {
        ++covered;
        continue;
      }
      Class got = kUnknown;
      if (x >= 0 && y >= 0 && x < width && y < height) {
        const uint8_t* pixel = &rgba[(size_t(y) * size_t(width) + size_t(x)) * 4];  // RGBA, top row first
        const auto f = flashed.find({b, j});
        through += f != flashed.end();
        got = classify(f == flashed.end() ? Rgb{float(pixel[0]), float(pixel[1]), float(pixel[2])}
                                          : under_flash(pixel, f->second));
      }
      ++seen[got];
      if (got != want) {
        if (wrong++ == 0)
          first = " (first: block " + std::to_string(b) + " slot " + std::to_string(j) + " should be " +
                  kClassNames[want] + ", the image shows " + kClassNames[got] + ")";
      }
    }
  const bool none_read = covered == int64_t(occ.num_blocks()) * occ.block_size();  // a check of nothing
  if (wrong || none_read) ok = false;
  return "verify: " + name + ": the cache has " + commas(expected[kLiveSlot]) + " live, " +
         commas(expected[kHoleSlot]) + " holes, " + commas(expected[kRoomSlot]) + " unwritten, " +
         commas(expected[kFreeSlot]) + " free slots; the image shows " + commas(seen[kLiveSlot]) + " live, " +
         commas(seen[kHoleSlot]) + " holes, " + commas(seen[kRoomSlot]) + " unwritten, " + commas(seen[kFreeSlot]) +
         " free, " + commas(seen[kUnknown]) + " unrecognised" +
         (through ? " (" + commas(through) + " read through fading flashes)" : "") +
         (covered ? "; " + commas(covered) + " under a tooltip or the mouse's outline, not checked" : "") + ": " +
         (wrong       ? commas(wrong) + " slots differ" + first
          : none_read ? std::string("no slot could be read, nothing was checked")
                      : std::string("all match")) +
         "\n";
}

// While playing, the sequence strip must show the token it scrolled to (the newest
// written token of the frame before) on whole lines, inside the picture (a strip pushed
// past the window's bottom shows nothing).
std::string verify_strip(const App::StripFollow& strip, int height, bool& ok) {
  const bool shown = strip.target_top >= strip.view_top && strip.target_bottom <= strip.view_bottom;
  const float lines = (strip.view_bottom - strip.view_top) / (strip.target_bottom - strip.target_top);
  const bool whole = std::fabs(lines - std::round(lines)) < 0.01f;  // no line cut in half at the bottom
  const bool inside = strip.view_top >= 0 && strip.view_bottom <= float(height);
  if (!shown || !whole || !inside) ok = false;
  const auto y = [](float v) { return std::to_string(int(v)); };
  return std::string("verify: the sequence strip ") +
         (shown ? "shows the newest written token it scrolled to"
                : "does not show the newest written token it scrolled to (its row is at y " + y(strip.target_top) +
                      ", the strip shows y " + y(strip.view_top) + " to " + y(strip.view_bottom) + ")") +
         (whole ? "" : "; it is " + fmt("%.2f", lines) + " lines tall, not a whole number") +
         (inside ? "" : "; it ends at y " + y(strip.view_bottom) + ", past the picture's bottom at " +
                            y(float(height))) +
         "\n";
}

}  // namespace

std::string App::verify(const std::vector<uint8_t>& rgba, int width, int height, const std::vector<Rect>& covers,
                        bool& ok) const {
  ok = true;
  if (!session) {
    ok = false;
    return "verify: nothing recorded\n";
  }
  std::string report;
  int sliding = 0;  // views not checked
  for (int v = 0; v < session->views(); ++v) {
    const Timeline& t = session->view(v);
    const std::string name = view_title(t.run());
    if (session->slide() && session->slide()->view == v) {  // tokens in flight cover slots they are not in
      report += "verify: " + name + ": survivors are sliding in this frame; its slots are not checked\n";
      ++sliding;
      continue;
    }
    std::vector<Rect> over = covers;  // the tooltips, and the outlines of the token under the mouse
    over.insert(over.end(), outlines.begin(), outlines.end());
    report += verify_pool(pools[v], t, slot_flashes(*session, v), over, name, rgba, width, height, ok);
  }
  if (sliding == session->views()) {  // a check that checked nothing is not a pass
    ok = false;
    report += "verify: every view is sliding in this frame: nothing to check (choose another --at or --frames)\n";
  }
  // The scroll set on the frame before shows now, unless that frame was not playing, or
  // was the strip's first (measured: such a scroll does not show in its second frame).
  const bool scrolled = strip.playing >= 2 && strip.frames >= 3;
  if (strip.playing > 0 && !scrolled)  // it shows where it stood
    report += "verify: the sequence strip is not checked: no scroll it set shows yet (play began in this frame, "
              "or the strip was first drawn in the one before)\n";
  else if (scrolled)
    report += verify_strip(strip, height, ok);
  return report;
}

}  // namespace kvscope::viz
