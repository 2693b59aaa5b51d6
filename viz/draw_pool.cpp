// The block pool: every physical block a row of block_size slots.
//
// A slot is drawn by its state in the replayed view (Timeline::slot_state):
//   free block            palette::kFree
//   live slot             its owner's colour, shaded by the token's score (ScoresAt)
//   hole                  palette::kHole: an empty slot in a block still in use that
//                         held a token (evicted, or moved away by compaction)
//   room                  palette::kRoom: a slot of a block in use not written yet
// and, for the events just applied ([Session::flash_from, cursor), its last kMaxFlash), a fading
// overlay on each slot's latest: written (white), evicted (bright red), moved
// (orange); and a block just given back to the pool (a light outline). While compaction slides, the
// moving tokens are drawn between their source and destination slots.
#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "app.h"
#include "palette.h"
#include "util/format.h"

namespace kvscope::viz {

// ---- geometry --------------------------------------------------------------------

float PoolGeometry::slot_x(int block, int slot) const {
  const int col = block % columns;
  return origin.x + float(col) * block_w + std::floor(float(slot) * slot_w);
}

float PoolGeometry::block_y(int block) const {
  const int row = block / columns;
  return origin.y + float(row) * (slot_h + gap_y);
}

bool PoolGeometry::hit(ImVec2 p, int& block, int& slot) const {
  if (!drawn || p.x < origin.x || p.y < origin.y) return false;
  const int col = int((p.x - origin.x) / block_w);
  const int row = int((p.y - origin.y) / (slot_h + gap_y));
  const int b = row * columns + col;
  if (col >= columns || b >= blocks) return false;
  if (p.y >= block_y(b) + slot_h) return false;  // the gap under a row of blocks
  // The slot whose edges [slot_x(s), slot_x(s + 1)) hold p.x. The edges are rounded
  // down to whole pixels, so a slot can start left of s * slot_w, and the quotient
  // fall short of it (never past): step forward to the slot drawn there.
  int s = int((p.x - origin.x - float(col) * block_w) / slot_w);
  while (s < block_size && p.x >= slot_x(b, s + 1)) ++s;
  if (s >= block_size) return false;  // the gap right of a block
  block = b, slot = s;
  return true;
}

PoolGeometry layout_pool(int blocks, int block_size, ImVec2 origin, ImVec2 size) {
  PoolGeometry best;
  best.origin = origin;
  best.blocks = blocks;
  best.block_size = block_size;
  float best_side = -1;
  // Try every column count worth trying; keep the one with the largest slots.
  for (int c = 1; c <= std::max(1, blocks); ++c) {
    const int rows = (blocks + c - 1) / c;
    const float gap_x = c > 1 ? px(3) : 0.0f;
    const float block_w = std::floor(size.x / float(c));
    const float slot_w = (block_w - gap_x) / float(block_size);
    // Whole-pixel rows, so every block row looks the same.
    const float pitch = size.y / float(rows) >= 2 ? std::floor(size.y / float(rows)) : size.y / float(rows);
    const float gap_y = pitch >= px(4) ? px(1) : 0.0f;
    const float slot_h = pitch - gap_y;
    const float side = std::min(slot_w, slot_h);
    if (side > best_side) {
      best_side = side;
      best.columns = c;
      best.block_w = block_w;
      best.slot_w = slot_w;
      best.slot_h = std::min(slot_h, std::max(slot_w * 1.5f, px(3)));  // no tall thin slots
      best.gap_x = gap_x;
      best.gap_y = gap_y;
    }
    if (slot_w < 0.25f) break;  // narrower only gets worse
  }
  best.slot_h = std::max(best.slot_h, 1.0f);
  best.drawn = true;
  return best;
}

// ---- drawing ----------------------------------------------------------------------

// Up to this many of the latest events flash (a long jump flashes only its end).
constexpr size_t kMaxFlash = 3000;

namespace {

// How strongly the event i of the flashing events [from, now) shows: the newest 0.85.
float flash_strength(size_t i, size_t from, size_t now) {
  return 0.25f + 0.6f * float(i - from + 1) / float(now - from);
}

// The first event that flashes in view i.
size_t flash_begin(const Session& s, int view) {
  const size_t now = s.view(view).cursor();
  return std::max(s.flash_from(view), now > kMaxFlash ? now - kMaxFlash : 0);
}

}  // namespace

std::vector<SlotFlash> slot_flashes(const Session& s, int view) {
  const Timeline& t = s.view(view);
  const Occupancy& occ = t.occupancy();
  const size_t from = flash_begin(s, view), now = t.cursor();
  std::vector<SlotFlash> out;
  std::set<std::pair<int, int>> touched;  // (block, slot) a later event wrote, evicted, or moved to or from
  for (size_t i = now; i-- > from;) {    // newest first: only a slot's latest event flashes
    const Event& e = t.event(i);
    const bool slot_event =
        e.kind == EventKind::SlotWritten || e.kind == EventKind::SlotEvicted || e.kind == EventKind::SlotMoved;
    if (!slot_event) continue;
    const bool latest = touched.insert({e.block, e.slot}).second;
    if (e.kind == EventKind::SlotMoved) touched.insert({e.from_block, e.from_slot});
    if (!latest) continue;
    uint32_t colour = 0;  // none: the slot no longer shows the event's result
    switch (e.kind) {
      case EventKind::SlotWritten:
        if (occ.position(e.block, e.slot) == e.pos) colour = palette::kWritten;
        break;
      case EventKind::SlotEvicted:
        if (t.slot_state(e.block, e.slot) == SlotState::Hole) colour = palette::kEvicted;
        break;
      case EventKind::SlotMoved:
        if (occ.position(e.block, e.slot) == e.pos) colour = palette::kMoving;
        break;
      default: break;
    }
    if (colour) out.push_back({e.block, e.slot, palette::alpha(colour, flash_strength(i, from, now))});
  }
  std::reverse(out.begin(), out.end());  // oldest first, as they are drawn
  return out;
}

namespace {

// Spaces that do not break (U+00A0): text_wrapped wraps a line only at ' ', so
// "moved 230 MB" stays whole.
std::string nowrap(const std::string& text) {
  std::string out;
  for (char ch : text) out += ch == ' ' ? std::string("\xc2\xa0") : std::string(1, ch);
  return out;
}

// "880 blocks in use (3.23 GB)", as one word: the start of a header's first line.
std::string in_use_text(int blocks, double in_use_bytes) {
  return nowrap(commas(blocks) + (blocks == 1 ? " block" : " blocks") + " in use (" + bytes(in_use_bytes) + ")");
}

// Two lines of numbers and the phase, wrapped at `width` so that a narrow window does
// not push the next view off the screen.
void header(const Timeline& t, const Session& s, int view, float width) {
  const float right = ImGui::GetCursorPosX() + width;
  const Counters& c = t.counters();
  ImGui::PushStyleColor(ImGuiCol_Text, view_colour(s, view));
  ImGui::Text("%s", view_title(t.run()).c_str());
  ImGui::PopStyleColor();
  ImGui::SameLine();
  // The numbers grow as the run plays. Where a line at its widest (every block in use,
  // "100.0%", every move made; digits are all one width) would not fit, it breaks at
  // its "|" from the start: a line that wrapped midway moved the pools down a line.
  const auto bar = [right](const std::string& widest) {
    const bool fits = ImGui::GetCursorPosX() + ImGui::CalcTextSize(widest.c_str()).x <= right;
    return std::string(fits ? "  |  " : "\n");
  };
  // Freed is of the full cache's blocks (the same sequences with no eviction), not of
  // the pool's: the two differ while sequences are still growing, or when they share it.
  const auto freed = [](const std::string& share, int64_t of) {  // not "1,000" on one line, "blocks" the next
    return "freed " + share + " of a full cache's " + nowrap(commas(of) + (of == 1 ? " block" : " blocks"));
  };
  const int blocks = t.occupancy().num_blocks();
  const std::string in_use = in_use_text(c.blocks_in_use, double(c.memory_in_use()));
  const std::string most = in_use_text(blocks, double(blocks) * double(c.bytes_per_block()));  // the widest
  std::string numbers = " " + in_use;
  numbers += bar(" " + most + "  |  " + freed("100.0%", std::max<int64_t>(blocks, c.full_cache_blocks)));
  numbers += c.all_released()  ? "every sequence released"
              : c.written == 0 ? "nothing written yet"
                               : freed(percent(c.blocks_freed_fraction()), c.full_cache_blocks);
  text_wrapped(numbers, right);
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kTextDim);
  const auto moved = [](const std::string& amount, int64_t slots) {
    return nowrap(slots ? "moved " + amount + " (" + commas(slots) + (slots == 1 ? " slot)" : " slots)")
                        : "no bytes moved");
  };
  std::string pool = "a pool of " + commas(blocks) + (blocks == 1 ? " block" : " blocks") + " of " +
                     plural(t.occupancy().block_size(), "slot");
  pool += bar(pool + "  |  " + moved("8.88 MB", int64_t(t.moves())));
  pool += moved(bytes(double(c.bytes_moved())), c.moved);
  text_wrapped(pool, right);
  // The phase changes as the run plays ("writing tokens", "round 1: compacting,
  // survivors slide forward"): on a line of its own, its length cannot wrap the
  // line above and move the pool below.
  text_wrapped(s.phase(view), right);
  ImGui::PopStyleColor();
}

void tooltip(const Timeline& t, int block, int slot, const ScoresAt& scores) {
  const Occupancy& occ = t.occupancy();
  const int owner = occ.owner(block);
  const int64_t pos = occ.position(block, slot);
  ImGui::BeginTooltip();
  ImGui::Text("block %d, slot %d", block, slot);
  if (t.slot_state(block, slot) != SlotState::Live) {
    for (const std::string& line : empty_slot_lines(t, block, slot)) ImGui::TextUnformatted(line.c_str());
  } else {
    ImGui::Text("sequence %d, absolute position %lld", owner, (long long)pos);
    if (auto sc = scores(owner, pos); sc && std::isinf(*sc))
      ImGui::TextUnformatted("score +inf: the policy always keeps it (SnapKV's observation window)");
    else if (sc)
      ImGui::Text("score %.4g (%s; higher is kept)", *sc, t.run().score_meaning().c_str());
    else
      ImGui::TextUnformatted(t.run().has_scores() ? "score: not scored yet"
                             : t.run().traced     ? "score: not recorded (a trace holds no scores)"
                                                  : "score: none (the policy has none)");
    const std::string& text = t.run().text(owner, pos);
    if (!text.empty()) ImGui::Text("text \"%s\"", text.c_str());
  }
  ImGui::EndTooltip();
}

}  // namespace

std::vector<std::string> empty_slot_lines(const Timeline& t, int block, int slot) {
  const Occupancy& occ = t.occupancy();
  const int owner = occ.owner(block);
  const SlotState state = t.slot_state(block, slot);
  if (state == SlotState::Free) return {"free: in the pool, ready for any sequence"};
  if (state == SlotState::Room) return {"not written yet: room in a block of sequence " + std::to_string(owner)};
  return {"hole in a block of sequence " + std::to_string(owner) + " (" + std::to_string(occ.live_in_block(block)) +
              " of " + std::to_string(occ.block_size()) + " slots live)",
          t.run().header.strategy == MemoryStrategy::ReuseHoles
              ? "the sequence's next tokens fill it; the block returns to the pool only when every slot is empty"
              : "the block returns to the pool only when every slot is empty"};
}

namespace {

// The colour of slot j of block b, owned by `owner` (>= 0): a token leaving in the
// compaction slide shows as the hole it leaves, an empty slot as a hole or room, a
// live one in its owner's colour, shaded by its score.
uint32_t slot_colour(const Timeline& t, const ScoresAt& scores, const std::vector<uint8_t>& leaving, int owner,
                     int b, int j) {
  const Occupancy& occ = t.occupancy();
  if (!leaving.empty() && leaving[size_t(b) * size_t(occ.block_size()) + size_t(j)]) return palette::kHole;
  const SlotState state = t.slot_state(b, j);
  if (state == SlotState::Hole) return palette::kHole;
  if (state == SlotState::Room) return palette::kRoom;
  const int64_t pos = occ.position(b, j);
  const auto sc = scores(owner, pos);
  return palette::token(owner, sc ? std::optional(scores.shade(*sc)) : std::nullopt, scores.known());
}

// Every block: free, or its slots in runs of equal colour (one rectangle a run);
// where slots are under a pixel wide, one colour mixing its live slots, holes and room.
void draw_blocks(ImDrawList* dl, const PoolGeometry& g, const Timeline& t, const ScoresAt& scores,
                 const std::vector<uint8_t>& leaving) {
  const Occupancy& occ = t.occupancy();
  const int B = occ.block_size();
  for (int b = 0; b < occ.num_blocks(); ++b) {
    const float y0 = g.block_y(b), y1 = y0 + g.slot_h;
    const int owner = occ.owner(b);
    if (owner < 0) {
      dl->AddRectFilled({g.slot_x(b, 0), y0}, {g.slot_x(b, B), y1}, palette::kFree);
      continue;
    }
    if (g.slot_w < 1.0f) {  // too small for slots: the block's mix of live slots, holes and room
      int holes = 0, room = 0;
      for (int j = 0; j < B; ++j) {
        const SlotState state = t.slot_state(b, j);
        holes += state == SlotState::Hole;
        room += state == SlotState::Room;
      }
      const uint32_t empty = holes + room ? palette::mix(palette::kHole, palette::kRoom, float(room) / float(holes + room))
                                          : palette::kHole;
      dl->AddRectFilled({g.slot_x(b, 0), y0}, {g.slot_x(b, B), y1},
                        palette::mix(empty, palette::live(owner, 0, false), float(B - holes - room) / float(B)));
      continue;
    }
    int run_start = 0;
    uint32_t run_colour = 0;
    for (int j = 0; j <= B; ++j) {
      const uint32_t col = j < B ? slot_colour(t, scores, leaving, owner, b, j) : 0;
      if (j == B || (j > 0 && col != run_colour)) {
        dl->AddRectFilled({g.slot_x(b, run_start), y0}, {g.slot_x(b, j), y1}, run_colour);
        run_start = j;
      }
      run_colour = col;
    }
  }
}

// Slot edges, where slots are wide enough to count: a block reads as its B slots,
// and a run of holes as so many holes.
void draw_slot_edges(ImDrawList* dl, const PoolGeometry& g, const Occupancy& occ) {
  if (g.slot_w < px(8)) return;
  const uint32_t edge = palette::alpha(palette::kBackground, 0.6f);
  for (int b = 0; b < occ.num_blocks(); ++b)
    for (int j = 1; j < occ.block_size(); ++j) {
      const float x = g.slot_x(b, j), y = g.block_y(b);
      dl->AddRectFilled({x, y}, {x + px(1), y + g.slot_h}, edge);
    }
}

// A block just given back to the pool: a fading outline, over the blocks of [from, cursor).
void draw_freed_blocks(ImDrawList* dl, const PoolGeometry& g, const Timeline& t, size_t from) {
  const Occupancy& occ = t.occupancy();
  const size_t now = t.cursor();
  for (size_t i = from; i < now; ++i) {
    const Event& e = t.event(i);
    if (e.kind != EventKind::BlockFreed || occ.owner(e.block) >= 0) continue;
    dl->AddRect({g.slot_x(e.block, 0) - px(1), g.block_y(e.block) - px(1)},
                {g.slot_x(e.block, occ.block_size()) + px(1), g.block_y(e.block) + g.slot_h + px(1)},
                palette::alpha(palette::kFreedEdge, flash_strength(i, from, now)), 0, 0, px(1));
  }
}

// Compaction in flight: each survivor of the batch a fraction `k` of the way from
// its slot to its destination, with a faint line back to where it came from.
void draw_slide(ImDrawList* dl, const PoolGeometry& g, const Timeline& t, const Session::Slide& slide, float k) {
  for (size_t i = slide.begin; i < slide.end; ++i) {
    const Event& e = t.event(i);
    const ImVec2 a = g.slot_min(e.from_block, e.from_slot), b = g.slot_min(e.block, e.slot);
    const ImVec2 p{a.x + (b.x - a.x) * k, a.y + (b.y - a.y) * k};
    const float w = std::max(g.slot_w, px(2)), h = std::max(g.slot_h, px(2));
    dl->AddLine({a.x + w / 2, a.y + h / 2}, {p.x + w / 2, p.y + h / 2}, palette::alpha(palette::kMoving, 0.18f),
                px(1));
    dl->AddRectFilled(p, {p.x + w, p.y + h}, palette::kMoving);
  }
}

// The token under the mouse, outlined: what the outline covers is kept for --verify.
void outline_slot(App& app, ImDrawList* dl, const PoolGeometry& g, int block, int slot) {
  const ImVec2 a = g.slot_min(block, slot), b = g.slot_max(block, slot);
  const float m = px(2);
  dl->AddRect({a.x - m, a.y - m}, {b.x + m, b.y + m}, palette::kHighlight, 0, 0, px(2));
  // What the line covers, px(2) wide on the rectangle's edge: a ring 2m wide around the slot.
  const float r = 2 * m;
  app.outlines.push_back({{a.x - r, a.y - r}, {b.x + r, a.y}});  // above
  app.outlines.push_back({{a.x - r, b.y}, {b.x + r, b.y + r}});  // below
  app.outlines.push_back({{a.x - r, a.y}, {a.x, b.y}});          // left
  app.outlines.push_back({{b.x, a.y}, {b.x + r, b.y}});          // right
}

}  // namespace

float pool_min_width(const Session& s, int view) {
  const Timeline& t = s.view(view);
  const int blocks = t.occupancy().num_blocks();  // the most in use: the widest number
  const std::string in_use = in_use_text(blocks, double(blocks) * double(t.counters().bytes_per_block()));
  // As header() draws them: the title, the spacing of SameLine, " " and the numbers.
  return ImGui::CalcTextSize(view_title(t.run()).c_str()).x + ImGui::GetStyle().ItemSpacing.x +
         ImGui::CalcTextSize(" ").x + ImGui::CalcTextSize(in_use.c_str()).x;
}

void draw_pool(App& app, int view, ImVec2 size) {
  const Session& s = *app.session;
  const Timeline& t = s.view(view);
  const Occupancy& occ = t.occupancy();

  ImGui::BeginGroup();
  const float top = ImGui::GetCursorScreenPos().y;
  header(t, s, view, size.x);
  // Both pools start below the tallest header either view has drawn since the run
  // was shown at this width: a header one line taller than the other's does not put
  // its pool lower, and one that grows a line (a number grown longer) moves the
  // blocks down once, never back up and down.
  const float height = ImGui::GetCursorScreenPos().y - top;
  if (app.header_width != size.x) app.header_width = size.x, app.header_reserve = 0;
  app.header_reserve = std::max(app.header_reserve, height);
  const float pad = app.header_reserve - height - ImGui::GetStyle().ItemSpacing.y;  // a Dummy adds the spacing
  if (pad > 0) ImGui::Dummy({1, pad});
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 area{size.x, std::max(px(20), size.y - (origin.y - top))};
  const PoolGeometry g = layout_pool(occ.num_blocks(), occ.block_size(), origin, area);
  app.pools[view] = g;
  ImDrawList* dl = ImGui::GetWindowDrawList();

  const ScoresAt scores = scores_for_shading(t);

  // Tokens in flight (compaction sliding): their source slots show as holes.
  const Session::Slide* slide = s.slide() && s.slide()->view == view ? s.slide() : nullptr;
  std::vector<uint8_t> leaving;  // [block * block_size + slot], empty when nothing slides
  if (slide) {
    leaving.assign(size_t(occ.num_blocks()) * size_t(occ.block_size()), 0);
    for (size_t i = slide->begin; i < slide->end; ++i)
      leaving[size_t(t.event(i).from_block) * size_t(occ.block_size()) + size_t(t.event(i).from_slot)] = 1;
  }

  draw_blocks(dl, g, t, scores, leaving);
  draw_slot_edges(dl, g, occ);
  if (g.slot_w >= 1.0f) {  // what just happened, fading
    for (const SlotFlash& f : slot_flashes(s, view))
      dl->AddRectFilled(g.slot_min(f.block, f.slot), g.slot_max(f.block, f.slot), f.colour);
    draw_freed_blocks(dl, g, t, flash_begin(s, view));
  }
  if (slide) draw_slide(dl, g, t, *slide, s.slide_progress());

  // The token under the mouse (in any view whose numbers name the same tokens, last
  // frame): outlined here too.
  if (app.hovered.token() && s.same_token_ids(app.hovered.view, view)) {
    const SlotRef r = t.locate(app.hovered.seq, app.hovered.pos);
    if (r.block >= 0) outline_slot(app, dl, g, r.block, r.slot);
  }

  ImGui::Dummy(area);
  int block = -1, slot = -1;
  if (ImGui::IsItemHovered() && g.hit(ImGui::GetIO().MousePos, block, slot)) {
    app.hover.view = view;
    app.hover.block = block;
    app.hover.slot = slot;
    if (t.slot_state(block, slot) == SlotState::Live)
      app.hover.seq = occ.owner(block), app.hover.pos = occ.position(block, slot);
    outline_slot(app, dl, g, block, slot);
    tooltip(t, block, slot, scores);
  }
  ImGui::EndGroup();
}

}  // namespace kvscope::viz
