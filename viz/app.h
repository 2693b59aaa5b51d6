// App: the window's state, and the frame that draws it.
//
// The model lives in session.h (Session: the recorded runs, the replayed
// Occupancy at the cursor, the counters, playback) and scenarios.h (what to
// record). App holds one Session plus what only the screen needs: the settings
// being edited, what the mouse points at, where each view was drawn. Every
// frame the draw_* functions (one file each) read the Session and draw it; none
// of them changes the cache state except through Session's seek/step/play.
//
//   draw_controls.cpp  the left panel: scenario and settings, counters, legend
//                      and the transport bar (play, step, speed, the timeline)
//   draw_pool.cpp      the block pool: every block a row of block_size slots
//   draw_sequence.cpp  the sequence: tokens in logical order, kept, evicted or released
//   draw_charts.cpp    the counters over time, with the (evicted)^B law
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "imgui.h"
#include "scenarios.h"
#include "session.h"

namespace kvscope::viz {

// What the mouse points at. The views fill App::hover during a frame; every
// view highlights App::hovered (the previous frame's), so a token under the
// mouse in one view lights up in the others.
struct Hover {
  int seq = -1;
  int64_t pos = -1;  // the token, when the mouse is on one
  int view = -1, block = -1, slot = -1;  // the pool slot under the mouse, if any; a token in
                                         // the strip: the view it shows (block and slot -1)
  bool token() const { return seq >= 0 && pos >= 0; }
};

// Where a pool view put its blocks: columns of blocks, each block a row of
// block_size slots. Slot edges are whole pixels, so slots tile without seams.
struct PoolGeometry {
  ImVec2 origin{0, 0};
  int blocks = 0, block_size = 0;
  int columns = 1;
  float block_w = 0, slot_w = 0, slot_h = 0;  // a block's width (slots + gap), a slot's size
  float gap_x = 0, gap_y = 0;
  bool drawn = false;

  float slot_x(int block, int slot) const;  // left edge (whole pixels)
  float block_y(int block) const;           // top edge
  ImVec2 slot_min(int block, int slot) const { return {slot_x(block, slot), block_y(block)}; }
  ImVec2 slot_max(int block, int slot) const { return {slot_x(block, slot + 1), block_y(block) + slot_h}; }
  bool hit(ImVec2 p, int& block, int& slot) const;  // the slot drawn over p; false between slots
};
// The columns that make slots as large as possible in `size`.
PoolGeometry layout_pool(int blocks, int block_size, ImVec2 origin, ImVec2 size);

// A fading flash over one slot: an event of the last moment (written, evicted, moved),
// drawn over the slot's own colour. The colour's alpha says how strong: newer, stronger.
struct SlotFlash {
  int block = 0, slot = 0;
  uint32_t colour = 0;
};
// View `view`'s slot flashes in this frame, in the order they are drawn (oldest first):
// of the events of [Session::flash_from, cursor) (the last 3,000 of them: a long jump
// flashes only its end), each slot's latest, while the slot
// still shows its result. So a slot shows one flash at most.
std::vector<SlotFlash> slot_flashes(const Session& s, int view);
// The sequence strip's title line: the primary view's counts ("798 written, 318 kept,
// 480 evicted", named by their run when the two runs differ) and why that view's.
struct StripCaption {
  std::string counts, why;
};
StripCaption strip_caption(const Session& s);
// What an empty slot of a view (no token in it) is, in lines (the tooltip's, the hover
// panel's): free, not written yet, or a hole, and when a hole's block comes back.
std::vector<std::string> empty_slot_lines(const Timeline& t, int block, int slot);

class App {
 public:
  explicit App(ModelSource model);

  // Records a scenario now (blocking) and shows it. kvscope::Error if it cannot run.
  void load(const Scenario& scenario);
  // Records the edited settings, or a scenario, in the background (the old run
  // stays on screen until the new one is ready).
  void record_async();
  void load_async(const Scenario& scenario);
  // Shows one or two recorded traces (kvscope ... --trace FILE), side by side.
  // kvscope::Error naming the file if one cannot be read or replayed.
  void load_traces(const std::vector<std::string>& paths);

  // One frame of the whole window: call between ImGui::NewFrame() and ImGui::Render().
  void frame(float dt);

  // The headline: "blog-16k-random: evicted 87.5% — freed 12.0% (holes) vs 87.5% (compact)".
  // Served runs schedule the requests each its own way, and evict different shares;
  // each "freed" is its run's average so far (serve-model, half-way): "evicted A%,
  // freed B% on average so far (holes) vs evicted C%, freed D% on average so far (compact)".
  // Once every request is released nothing is held, and a run's figure is its
  // average over the tokens written: "freed 12.6% on average (holes)".
  // In pieces for the window, which draws each run's numbers in its strategy's colour.
  struct HeadlinePiece {
    std::string text;
    int view = -1;  // the run whose colour the text takes; -1: plain
  };
  std::vector<HeadlinePiece> headline_pieces() const;
  std::string headline() const;  // the pieces joined (printed with --screenshot)
  // The rule the picture shows, under the headline: "A block goes back to the pool only
  // when all 16 of its slots are empty: one survivor holds the whole block."
  std::string rule() const;

  // --verify: reads the pixels of the last frame (RGBA, top row first) back
  // into slot classes (free, live, hole, room) by the palette, and compares them with
  // the replayed occupancy of every pool view (a slot under fading flashes: with them
  // blended off; one under a tooltip, a rectangle of `covers`, or under `outlines`: not
  // read); while playing, also that the sequence strip shows the newest written token
  // it scrolled to. Returns a report; ok = no mismatch.
  struct Rect {
    ImVec2 min, max;  // screen pixels
  };
  std::string verify(const std::vector<uint8_t>& rgba, int width, int height, const std::vector<Rect>& covers,
                     bool& ok) const;
  std::vector<Rect> outlines;  // this frame's outlines around pool slots (the token under the mouse), for verify

  // State the draw_*.cpp functions read and write.
  ModelSource model;
  std::string scenario;   // the scenario last loaded ("" once the settings were edited and re-recorded)
  std::string summary;    // its one-line description
  RunSettings edit;       // the controls' settings (recorded by record_async)
  Recording recording;    // what is shown
  std::unique_ptr<Session> session;
  // A recording in the background: the runs, and their Session (replayed and charted there too).
  struct Recorded {
    Recording recording;
    std::unique_ptr<Session> session;
  };
  std::future<Recorded> pending;
  RunSettings pending_from;  // `edit` when `pending` started: a change since then is kept when it lands
  // What records in the background: record() (scenarios.h). The tests put one here
  // that waits for their word, to see the frames drawn while a recording runs.
  std::function<Recording(const RunSettings&, const ModelSource&)> recorder = record;
  std::optional<Scenario> pending_scenario;  // what `pending` records, when a scenario
  std::string error;      // the last recording's failure, shown until the next one
  Hover hover, hovered;   // this frame's, the last frame's
  PoolGeometry pools[2];
  // The sequence strip's text view while playing, last frame (screen y). Each frame it
  // scrolls to the newest written token, and ImGui applies a scroll on the next frame:
  // so a frame shows the token the frame before scrolled to (the newest then). --verify
  // checks that that token's row lies inside the part of the strip on screen.
  struct StripFollow {
    int frames = 0;               // frames in a row the text view was drawn (0: not drawn now)
    int playing = 0;              // the last of them drawn while playing (0: not playing now)
    int seq = -1;                 // the newest written token, scrolled to
    int64_t pos = -1;
    float target_top = 0, target_bottom = 0;  // the row of the token the frame before scrolled to
    float view_top = 0, view_bottom = 0;      // the strip's part on screen
  } strip;
  // The pools' headers: the tallest drawn since the run was shown at this view width
  // (pixels); both pools start that far down, and stay there when a header gets shorter.
  float header_reserve = 0, header_width = 0;
  Unit step_unit = Unit::Event;
  ImFont* title_font = nullptr;

 private:
  void adopt(Recorded rec);
  void adopt_a_finished_recording();
  void keyboard();
  void draw_headline();
};

// How App::frame shares the height below the transport bar (pixels) among the pools,
// the sequence strip and the charts: 13% to the strip and 25% to the charts, at least
// 70 and 150 px, the rest to the pools. The pools are what the app is for: where that
// would leave them less than half (three fifths when stacked: two headers), as in a
// 1024x600 window, the charts are left out (0) and the strip takes at most 70 px.
struct PanelHeights {
  float pools = 0, strip = 0, charts = 0;
};
PanelHeights panel_heights(float rest, float spacing, bool stacked);

// The views (each in its own file).
void draw_controls(App& app, ImVec2 size);
void draw_transport(App& app, float width);
void draw_legend(App& app);
void draw_pool(App& app, int view, ImVec2 size);
// The narrowest a pool view can be drawn (pixels): the start of its header's first
// line, "compaction  1,000 blocks in use (32.8 MB)" at the most blocks the run can
// use, does not break. App::frame draws two views one above the other rather than
// side by side narrower than this (once the right view was pushed off the window).
float pool_min_width(const Session& s, int view);
void draw_sequence(App& app, ImVec2 size);
void draw_charts(App& app, ImVec2 size);

// Whether `w` more pixels fit after the last item, on its line, before the window's
// right edge; same_line_if_fits continues the line when they do (a narrow window
// wraps rows instead of cutting them off). In draw_controls.cpp.
bool fits_after_last_item(float w);
void same_line_if_fits(float w);
// Text wrapped at spaces only, up to `right` (window coordinates; default: the
// content region's right edge). ImGui's own wrapping also breaks after '.' and ',',
// splitting "12.0%" and "1,000" across lines. The first line starts at the cursor
// (after an item, with SameLine), spaces at its start kept; a no-break space
// (U+00A0) keeps words together, and a '\n' starts a new line.
void text_wrapped(const std::string& text, float right = -1);

// The UI scale: screen pixels per pixel of the app's design (15 px text). 1 on an
// ordinary screen; 2 where the desktop scales everything by 2 (a 4K laptop), so the
// text and every fixed size are twice as many pixels and read the same. main sets
// it before the first frame (--scale, else the monitor's content scale) and scales
// the fonts and ImGui's style to match. The views write each fixed size as px(n);
// what they measure (text, ImGui's frame heights) is at the scale already.
void set_ui_scale(float scale);
float ui_scale();
inline float px(float design_pixels) { return design_pixels * ui_scale(); }
// ImGui's style for the app: its colours and spacing, every size at the UI scale.
void use_app_style();

// A strategy as a title: "holes only", "hole reuse", "compaction".
const char* strategy_title(MemoryStrategy s);
// A view's title: its strategy's, and its name when it has one ("compaction, h2o.trace");
// "no eviction" for a run whose policy is "none" (its strategy was never used).
std::string view_title(const Run& run);
// A view's colour (its title, its chart lines): its strategy's; the right view's
// own when both views share a strategy.
uint32_t view_colour(const Session& s, int view);

}  // namespace kvscope::viz
