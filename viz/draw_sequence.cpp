// The sequence: every token in logical order (position 0, 1, 2, ...), by its state at
// the cursor (Timeline::token_state): not written yet, live in the cache, evicted by
// a round of the policy, or released with its request (a served run). The policy
// makes the same choices under every memory strategy, so one strip serves both
// pool views; where the runs differ (served requests, two unrelated traces) the
// strip shows the primary run and says so. With a model's text (and not too many
// tokens) the tokens are drawn as words; otherwise as cells, several tokens a
// cell for long runs.
#include <algorithm>
#include <cmath>

#include "app.h"
#include "palette.h"
#include "util/format.h"

namespace kvscope::viz {

namespace {

uint32_t colour_of(TokenState st, int seq, int64_t pos, const ScoresAt& scores) {
  switch (st) {
    case TokenState::Future: return palette::kSeqFuture;
    case TokenState::Evicted: return palette::kSeqEvicted;
    case TokenState::Released: return palette::kSeqReleased;
    case TokenState::Live: {
      const auto sc = scores(seq, pos);
      return palette::token(seq, sc ? std::optional(scores.shade(*sc)) : std::nullopt, scores.known());
    }
  }
  return 0;
}

void tooltip(const App& app, int seq, int64_t pos, TokenState st, const ScoresAt& scores) {
  const Session& s = *app.session;
  const Run& run = s.primary_view().run();
  ImGui::BeginTooltip();
  ImGui::Text("sequence %d, absolute position %lld", seq, (long long)pos);
  const std::string& text = run.text(seq, pos);
  if (!text.empty()) ImGui::Text("text \"%s\"", text.c_str());
  if (st == TokenState::Future) {
    ImGui::TextUnformatted("not written yet");
  } else if (st == TokenState::Released) {
    ImGui::TextUnformatted("released: its request finished or was preempted, and its sequence went with its blocks");
  } else if (st == TokenState::Evicted) {
    ImGui::TextUnformatted("evicted: its slot became a hole");
  } else {
    if (auto sc = scores(seq, pos)) ImGui::Text("score %.4g (%s; higher is kept)", *sc, run.score_meaning().c_str());
    for (int v = 0; v < s.views(); ++v) {
      if (!s.same_token_ids(s.primary(), v)) continue;  // its numbers name other tokens there
      const SlotRef r = s.view(v).locate(seq, pos);
      if (r.block >= 0) ImGui::Text("%s: block %d, slot %d", view_title(s.view(v).run()).c_str(), r.block, r.slot);
    }
  }
  ImGui::EndTooltip();
}

// How one sequence's band lays its n tokens out as square cells, row by row:
// g tokens a cell when there are more tokens than pixels.
struct CellGrid {
  int64_t g = 1;        // tokens per cell
  int64_t cells = 0;    // ceil(n / g)
  int64_t per_row = 1;  // cells per row
  float side = 1;       // a cell's side, pixels
  float gap = 0;        // pixels left empty between cells (when they are big enough to show it)

  ImVec2 corner(ImVec2 origin, int64_t c) const {
    return {origin.x + float(c % per_row) * side, origin.y + float(c / per_row) * side};
  }
};

// The largest cells (whole pixels) that fit n tokens into width x height.
CellGrid cell_grid(int64_t n, float width, float height) {
  CellGrid grid;
  grid.g = std::max<int64_t>(1, int64_t(std::ceil(double(n) / (double(width) * double(height)))));
  grid.cells = (n + grid.g - 1) / grid.g;
  grid.side = std::max(1.0f, std::floor(std::sqrt(width * height / float(grid.cells))));
  grid.per_row = std::max<int64_t>(1, int64_t(width / grid.side));
  while (grid.side > 1 && float((grid.cells + grid.per_row - 1) / grid.per_row) * grid.side > height) {
    grid.side -= 1;
    grid.per_row = std::max<int64_t>(1, int64_t(width / grid.side));
  }
  grid.gap = grid.side >= 5 ? 1.0f : 0.0f;
  return grid;
}

// Cell c of sequence seq (n tokens): one token's colour, or for g tokens a mix from
// evicted to live by the share of its written tokens still live.
uint32_t cell_colour(const Timeline& t, int seq, int64_t n, const CellGrid& grid, int64_t c, const ScoresAt& scores) {
  if (grid.g == 1) return colour_of(t.token_state(seq, c), seq, c, scores);
  int live = 0, written = 0, released = 0;
  for (int64_t p = c * grid.g; p < std::min(n, (c + 1) * grid.g); ++p) {
    const TokenState st = t.token_state(seq, p);
    written += st != TokenState::Future;
    live += st == TokenState::Live;
    released += st == TokenState::Released;
  }
  if (written == 0) return palette::kSeqFuture;
  if (released == written) return palette::kSeqReleased;
  return palette::mix(palette::kSeqEvicted, palette::live(seq, 0, false), float(live) / float(written));
}

// The cells of one band, one rectangle per run of equal colour along each row.
void fill_cells(ImDrawList* dl, const Timeline& t, int seq, int64_t n, const CellGrid& grid, ImVec2 o,
                const ScoresAt& scores) {
  for (int64_t row_start = 0; row_start < grid.cells; row_start += grid.per_row) {
    const int64_t row_end = std::min(grid.cells, row_start + grid.per_row);
    const float y = o.y + float(row_start / grid.per_row) * grid.side;
    int64_t run_start = row_start;
    uint32_t run_colour = cell_colour(t, seq, n, grid, row_start, scores);
    for (int64_t c = row_start + 1; c <= row_end; ++c) {
      const uint32_t col = c < row_end ? cell_colour(t, seq, n, grid, c, scores) : 0;
      if (c == row_end || col != run_colour) {
        dl->AddRectFilled({o.x + float(run_start - row_start) * grid.side, y},
                          {o.x + float(c - row_start) * grid.side - grid.gap, y + grid.side - grid.gap}, run_colour);
        run_start = c;
        run_colour = col;
      }
    }
  }
}

// Tokens as cells: one band per sequence, the hovered token outlined, the mouse's tooltip.
void draw_cells(App& app, const Timeline& t, const ScoresAt& scores, ImVec2 origin, ImVec2 area) {
  const Session& s = *app.session;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const std::vector<int64_t>& lengths = t.final_lengths();
  const int seqs = std::max(1, int(lengths.size()));
  const float band_gap = px(4);
  const float band_h = (area.y - band_gap * float(seqs - 1)) / float(seqs);
  for (int k = 0; k < int(lengths.size()); ++k) {
    const int64_t n = lengths[size_t(k)];
    if (n == 0) continue;
    const ImVec2 o{origin.x, origin.y + float(k) * (band_h + band_gap)};
    const CellGrid grid = cell_grid(n, area.x, band_h);
    fill_cells(dl, t, k, n, grid, o, scores);
    // The hovered token (any view, last frame).
    if (app.hovered.token() && s.same_token_ids(app.hovered.view, s.primary()) && app.hovered.seq == k &&
        app.hovered.pos < n) {
      const ImVec2 a = grid.corner(o, app.hovered.pos / grid.g);
      const float m = px(2);
      dl->AddRect({a.x - m, a.y - m}, {a.x + grid.side + m, a.y + grid.side + m}, palette::kHighlight, 0, 0, px(2));
    }
    // The mouse.
    const ImVec2 m = ImGui::GetIO().MousePos;
    if (ImGui::IsWindowHovered() && m.x >= o.x && m.y >= o.y && m.x < o.x + float(grid.per_row) * grid.side &&
        m.y < o.y + band_h) {
      const int64_t c = int64_t((m.y - o.y) / grid.side) * grid.per_row + int64_t((m.x - o.x) / grid.side);
      if (c < grid.cells) {
        const int64_t pos = c * grid.g;
        const TokenState st = t.token_state(k, pos);
        if (st == TokenState::Live) app.hover.view = s.primary(), app.hover.seq = k, app.hover.pos = pos;
        tooltip(app, k, pos, st, scores);
      }
    }
  }
}

// Tokens as words, on lines, in a scrolling child as tall as the whole lines that fit
// in `area` (a line cut in half at the bottom reads as a line of different words).
void draw_text(App& app, const Timeline& t, const ScoresAt& scores, ImVec2 area) {
  const Session& s = *app.session;
  const float line_h = ImGui::GetTextLineHeight() + px(4);  // a word's box: its text, px(2) above and below
  const float view_h = std::max(1.0f, std::floor(area.y / line_h)) * line_h;
  ImGui::BeginChild("sequence-text", {area.x, view_h}, false);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 start = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  float x = start.x, y = start.y, newest_y = y, target_y = y;
  int newest_seq = -1;
  int64_t newest_pos = -1;
  const ImVec2 m = ImGui::GetIO().MousePos;
  const bool window_hovered = ImGui::IsWindowHovered();
  const std::vector<int64_t>& lengths = t.final_lengths();
  for (int k = 0; k < int(lengths.size()); ++k) {
    for (int64_t pos = 0; pos < lengths[size_t(k)]; ++pos) {
      const std::string& raw = t.run().text(k, pos);
      const char* text = raw.empty() ? "?" : raw.c_str();
      const float w = ImGui::CalcTextSize(text).x + px(5);  // the box, and a gap before the next word
      if (x + w > start.x + width && x > start.x) x = start.x, y += line_h;
      const TokenState st = t.token_state(k, pos);
      const ImVec2 a{x, y}, b{x + w - px(1), y + line_h - px(1)};
      if (st != TokenState::Future) {
        const uint32_t colour = colour_of(st, k, pos, scores);
        const uint32_t bg = st == TokenState::Live ? palette::shade(colour, 0.55f) : colour;
        dl->AddRectFilled(a, b, bg, px(2));
        newest_y = y, newest_seq = k, newest_pos = pos;
      }
      if (k == app.strip.seq && pos == app.strip.pos) target_y = y;
      dl->AddText({x + px(2), y + px(2)}, st == TokenState::Live ? palette::kText : palette::kTextDim, text);
      if (st == TokenState::Evicted)
        dl->AddLine({x + px(1), y + line_h / 2}, {b.x - px(1), y + line_h / 2}, palette::alpha(palette::kEvicted, 0.7f),
                    px(1));
      if (app.hovered.token() && s.same_token_ids(app.hovered.view, s.primary()) && app.hovered.seq == k &&
          app.hovered.pos == pos)
        dl->AddRect({a.x - px(1), a.y - px(1)}, {b.x + px(1), b.y + px(1)}, palette::kHighlight, px(2), 0, px(2));
      if (window_hovered && m.x >= a.x && m.x < b.x && m.y >= a.y && m.y < b.y) {
        if (st == TokenState::Live) app.hover.view = s.primary(), app.hover.seq = k, app.hover.pos = pos;
        tooltip(app, k, pos, st, scores);
      }
      x += w;
    }
    x = start.x, y += line_h + px(6);  // each sequence on its own lines
  }
  ImGui::Dummy({width, y - start.y});
  // While playing, follow the writing: scroll so the newest written row sits two rows
  // above the strip's bottom (a strip of one line, in a short window: on that line).
  // start is on screen, so newest_y - start.y is the row's place in the content,
  // already net of the current scroll.
  const float view_top = ImGui::GetWindowPos().y;
  const float view_bottom = view_top + ImGui::GetWindowSize().y;
  ++app.strip.frames;
  app.strip.playing = app.session->playing ? app.strip.playing + 1 : 0;
  app.strip.seq = newest_seq, app.strip.pos = newest_pos;
  app.strip.target_top = target_y, app.strip.target_bottom = target_y + line_h;
  app.strip.view_top = view_top, app.strip.view_bottom = view_bottom;
  const float rows_up = std::min(view_h, 2 * line_h);
  if (app.session->playing) ImGui::SetScrollY(std::max(0.0f, newest_y - start.y - view_h + rows_up));
  ImGui::EndChild();
  // The part of a line left over, so that what follows starts where it would have.
  const float left_over = area.y - view_h - ImGui::GetStyle().ItemSpacing.y;
  if (left_over > 0) ImGui::Dummy({area.x, left_over});
}

}  // namespace

StripCaption strip_caption(const Session& s) {
  const Timeline& t = s.primary_view();
  const Counters& c = t.counters();
  StripCaption out;
  out.counts = commas(c.written) + " written, " + commas(c.live()) + " kept, " + commas(c.evicted) + " evicted";
  const std::string shown = std::string("the run on the ") + (s.primary() == 0 ? "left" : "right");
  out.why = "(the policy's choice, the same under every strategy)";
  if (t.run().served()) {  // served requests are scheduled by what each strategy frees, so their runs differ
    out.counts += ", " + commas(c.released) + " released with their requests";
    out.why = s.views() > 1 ? "(" + shown + "; each strategy schedules the requests differently)"
                            : "(a row per request)";
  } else if (!s.same_schedule()) {  // two traces of different runs (kvscope-viz --trace A,B)
    out.why = "(" + shown + "; the other wrote or evicted other tokens)";
  }
  // Runs that differ: the counts name theirs, even where the reason is left to a tooltip.
  if (s.views() > 1 && (t.run().served() || !s.same_schedule())) out.counts = view_label(t.run()) + ": " + out.counts;
  return out;
}

void draw_sequence(App& app, ImVec2 size) {
  const Session& s = *app.session;
  const Timeline& t = s.primary_view();
  ImGui::BeginGroup();
  const float top = ImGui::GetCursorScreenPos().y;
  const float right = ImGui::GetCursorPosX() + size.x;  // this area's right edge, in window coordinates
  ImGui::TextUnformatted("The sequence, in token order:");
  const auto [counts, why] = strip_caption(s);
  // The counts and the reason on the title's line when they fit there; in a narrow
  // window, the reason goes on the lines below, unless that would leave the strip less
  // than two lines of tokens (a short window): then it is the counts' tooltip.
  const std::string line = counts + " " + why;
  const bool fits = fits_after_last_item(ImGui::CalcTextSize(line.c_str()).x);
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kTextDim);
  ImGui::SameLine();
  text_wrapped(fits ? line : counts, right);
  if (!fits) {
    const float why_h = ImGui::CalcTextSize(why.c_str(), nullptr, false, right - ImGui::GetCursorPosX()).y +
                        ImGui::GetStyle().ItemSpacing.y;
    const float strip_left = top + size.y - ImGui::GetCursorScreenPos().y - why_h;  // for the tokens, below it
    if (strip_left >= 2 * (ImGui::GetTextLineHeight() + px(4)))
      text_wrapped(why, right);
    else if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s", why.c_str());
  }
  ImGui::PopStyleColor();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 area{size.x, std::max(px(10), size.y - (origin.y - top))};

  const ScoresAt scores = scores_for_shading(t);
  int64_t total = 0;
  for (int64_t n : t.final_lengths()) total += n;
  const bool text = !t.run().token_text.empty() && total <= 4000;
  if (!text) app.strip.frames = app.strip.playing = 0;  // not drawn: counted again from when it is
  if (text) {
    draw_text(app, t, scores, area);
  } else {
    draw_cells(app, t, scores, origin, area);
    ImGui::Dummy(area);
  }
  ImGui::EndGroup();
}

}  // namespace kvscope::viz
