// The counters over time, drawn with ImGui's draw list.
//
// The series are Session::history(): the Counters (counters.h) of every view
// sampled along the whole run, x = the primary view's event index. The values
// printed above each chart are the counters at the cursor.
//   left   tokens evicted %, blocks freed % per strategy, and for random eviction
//          in one round, nothing protected, beside holes only (Session::shows_law), the law
//          (evicted fraction)^block_size: the blocks it frees without compaction
//   right  memory in use per strategy, and the bytes compaction has moved
// The axes end at round numbers (axis.h).
// Clicking or dragging in a chart moves the cursor there.
#include <algorithm>
#include <cmath>
#include <functional>

#include "app.h"
#include "axis.h"
#include "palette.h"
#include "util/format.h"

namespace kvscope::viz {

namespace {

struct Frame {
  ImVec2 a, b;    // the plot area
  double x_max;   // events
  double y_max;   // value at the top
  ImVec2 at(double x, double y) const {
    return {a.x + float(x / std::max(x_max, 1.0)) * (b.x - a.x), b.y - float(y / std::max(y_max, 1e-12)) * (b.y - a.y)};
  }
};

// `thickness` in the design's pixels (px).
void polyline(ImDrawList* dl, const Frame& f, const std::vector<Sample>& h, const std::function<double(const Sample&)>& y,
              uint32_t colour, float thickness, bool dashed) {
  thickness = px(thickness);
  if (!dashed) {  // a NaN sample (a number that does not exist there) leaves a gap
    std::vector<ImVec2> pts;
    auto flush = [&] {
      dl->AddPolyline(pts.data(), int(pts.size()), colour, 0, thickness);
      pts.clear();
    };
    for (const Sample& s : h) {
      const double v = y(s);
      if (std::isnan(v)) flush();
      else pts.push_back(f.at(double(s.x), v));
    }
    flush();
    return;
  }
  std::vector<ImVec2> pts;
  pts.reserve(h.size());
  for (const Sample& s : h) pts.push_back(f.at(double(s.x), y(s)));
  // Dashes of 6 px on, 4 off, measured along the line.
  const float on = px(6), period = px(10);
  float along = 0;
  for (size_t i = 1; i < pts.size(); ++i) {
    const ImVec2 p = pts[i - 1], q = pts[i];
    // A NaN end (no value yet: the law before a token is written) leaves a gap. It
    // once made `along` NaN, and no dash was drawn from there on: the whole line.
    if (std::isnan(p.y) || std::isnan(q.y)) continue;
    const float len = std::hypot(q.x - p.x, q.y - p.y);
    for (float d = 0; d < len;) {
      const float phase = std::fmod(along + d, period);
      const float step = std::min(len - d, phase < on ? on - phase : period - phase);
      if (phase < on) {
        const float t0 = d / len, t1 = (d + step) / len;
        dl->AddLine({p.x + (q.x - p.x) * t0, p.y + (q.y - p.y) * t0}, {p.x + (q.x - p.x) * t1, p.y + (q.y - p.y) * t1},
                    colour, thickness);
      }
      d += std::max(step, 0.01f);
    }
    along += len;
  }
}

// The chart's key, in a box in a corner of the plot: a line sample, a label, the value at the cursor.
struct Key {
  std::string label;
  std::string brief;  // the label in a narrow chart: the measure in a word, the run by its short name
  std::string value;
  uint32_t colour;
  bool dashed;
};

// A line drawn on a chart: its frame (the memory chart has two y axes) and its values.
struct Line {
  const Frame* frame;
  std::function<double(const Sample&)> y;
};

// The key's size. Its value column is at least as wide as "888.8 MB", so the box
// keeps its size while the values change under playback.
ImVec2 key_size(const std::vector<Key>& keys) {
  const float line_h = ImGui::GetTextLineHeight() + px(2);
  const bool values = std::any_of(keys.begin(), keys.end(), [](const Key& k) { return !k.value.empty(); });
  float label_w = 0, value_w = values ? ImGui::CalcTextSize("888.8 MB").x : 0;
  for (const Key& k : keys) {
    label_w = std::max(label_w, ImGui::CalcTextSize(k.label.c_str()).x);
    value_w = std::max(value_w, ImGui::CalcTextSize(k.value.c_str()).x);
  }
  return {px(8 + 22 + 6) + label_w + px(12) + value_w + px(8), px(6) + line_h * float(keys.size())};
}

// In a narrow window, a key wider than its plot drops its values (the counters
// table has them), then takes its brief labels ("freed (holes)" for "blocks freed,
// holes only": each still names its run), before it is cut at the chart's edge.
std::vector<Key> fitted(std::vector<Key> keys, const Frame& f) {
  const float room = f.b.x - f.a.x - px(12);
  if (key_size(keys).x > room)
    for (Key& k : keys) k.value.clear();
  if (key_size(keys).x > room)
    for (Key& k : keys) k.label = k.brief;
  return keys;
}

// Where the key goes: the corner of the plot where it hides the least of the lines,
// measured in pixels of line under the box (a steep drop is few samples but a long
// line). Top left unless another corner hides less than half as much. Measured over
// the whole run, so it stays put while the run plays; measured again only when the
// session, the plot or the key's size changes (`last`: one per chart).
struct KeyPlace {
  uint64_t session = 0;  // Session::id(), never 0
  ImVec2 a, b, size, at;
};

ImVec2 key_corner(const Frame& f, ImVec2 size, const Session& s, const std::vector<Line>& lines, KeyPlace& last) {
  auto same = [](ImVec2 p, ImVec2 q) { return p.x == q.x && p.y == q.y; };
  if (last.session == s.id() && same(last.a, f.a) && same(last.b, f.b) && same(last.size, size)) return last.at;
  const std::vector<Sample>& h = s.history();
  // A key wider (or taller) than the plot starts at its left (top) edge in every
  // corner: its labels' ends are cut at the chart's edge, never their beginnings.
  const float left = f.a.x + px(6), right = std::max(left, f.b.x - px(6) - size.x);
  const float top = f.a.y + px(4), bottom = std::max(top, f.b.y - px(4) - size.y);
  const ImVec2 corners[] = {{left, top}, {right, top}, {right, bottom}, {left, bottom}};
  auto hidden = [&](ImVec2 c) {  // pixels of line inside the box at c, in steps of 2 px
    auto inside = [&](ImVec2 p) { return p.x >= c.x && p.x <= c.x + size.x && p.y >= c.y && p.y <= c.y + size.y; };
    float length = 0;
    for (const Line& line : lines)
      for (size_t i = 1; i < h.size(); ++i) {
        const ImVec2 p = line.frame->at(double(h[i - 1].x), line.y(h[i - 1]));
        const ImVec2 q = line.frame->at(double(h[i].x), line.y(h[i]));
        const float len = std::hypot(q.x - p.x, q.y - p.y);
        if (std::isnan(len)) continue;  // a gap in the line (a NaN sample)
        const int steps = std::max(1, int(len / 2));
        for (int k = 0; k < steps; ++k) {
          const float t = (float(k) + 0.5f) / float(steps);
          if (inside({p.x + (q.x - p.x) * t, p.y + (q.y - p.y) * t})) length += len / float(steps);
        }
      }
    return length;
  };
  const float top_left = hidden(corners[0]);
  ImVec2 best = corners[0];
  float least = top_left;
  for (int i = 1; i < 4; ++i)
    if (const float x = hidden(corners[i]); x < least && x < top_left / 2) least = x, best = corners[i];
  last = {s.id(), f.a, f.b, size, best};
  return best;
}

void key_box(ImDrawList* dl, ImVec2 at, const std::vector<Key>& keys) {
  const float line_h = ImGui::GetTextLineHeight() + px(2);
  const ImVec2 size = key_size(keys);
  const float w = size.x;
  dl->AddRectFilled(at, {at.x + w, at.y + size.y}, palette::alpha(palette::kBackground, 0.85f), px(3));
  const float x0 = at.x + px(8), sample = px(22);  // the line sample: from x0, this long
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key& k = keys[i];
    const float y = at.y + px(3) + line_h * float(i);
    const float mid = y + line_h / 2;
    if (k.dashed)
      for (float x = 0; x < sample; x += px(8))
        dl->AddLine({x0 + x, mid}, {x0 + std::min(x + px(5), sample), mid}, k.colour, px(2));
    else
      dl->AddLine({x0, mid}, {x0 + sample, mid}, k.colour, px(2.5f));
    dl->AddText({x0 + sample + px(6), y}, palette::kText, k.label.c_str());
    dl->AddText({at.x + w - px(8) - ImGui::CalcTextSize(k.value.c_str()).x, y}, k.colour, k.value.c_str());
  }
}

Frame plot_area(ImVec2 origin, ImVec2 size, double x_max, double y_max) {
  return {{origin.x + px(52), origin.y + px(4)}, {origin.x + size.x - px(8), origin.y + size.y - px(18)}, x_max, y_max};
}

void axes(ImDrawList* dl, const Frame& f, const std::vector<std::string>& y_labels) {
  dl->AddRectFilled({f.a.x - px(52), f.a.y - px(4)}, {f.b.x + px(8), f.b.y + px(18)}, palette::kPanel, px(3));
  for (size_t i = 0; i < y_labels.size(); ++i) {
    const float y = f.b.y - (f.b.y - f.a.y) * float(i) / float(y_labels.size() - 1);
    dl->AddLine({f.a.x, y}, {f.b.x, y}, palette::kGrid, px(1));
    dl->AddText({f.a.x - px(48), y - px(7)}, palette::kTextDim, y_labels[i].c_str());
  }
  dl->AddText({f.a.x, f.b.y + px(2)}, palette::kTextDim, "start");
  const char* end = "events \xe2\x86\x92 end";
  dl->AddText({f.b.x - ImGui::CalcTextSize(end).x, f.b.y + px(2)}, palette::kTextDim, end);
}

// The cursor, a vertical line: drawn before the key, which it must not cross out.
void cursor_line(ImDrawList* dl, const Frame& f, const Session& s) {
  const ImVec2 p = f.at(double(s.cursor()), 0);
  dl->AddLine({p.x, f.a.y}, {p.x, f.b.y}, palette::alpha(palette::kHighlight, 0.8f), px(1.5f));
}

// A click or a drag on the chart moves the cursor there.
void seek_on_click(App& app, const Frame& f, ImVec2 origin, ImVec2 size, const char* id) {
  ImGui::SetCursorScreenPos(origin);
  ImGui::InvisibleButton(id, size);
  if (ImGui::IsItemActive()) {
    const float t = std::clamp((ImGui::GetIO().MousePos.x - f.a.x) / (f.b.x - f.a.x), 0.0f, 1.0f);
    app.session->seek(size_t(std::llround(double(t) * f.x_max)));
  }
}

void fraction_chart(App& app, ImVec2 origin, ImVec2 size) {
  const Session& s = *app.session;
  const auto& h = s.history();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const Frame f = plot_area(origin, size, double(s.length()), 1.0);
  axes(dl, f, {"0%", "25%", "50%", "75%", "100%"});
  const bool law = s.shows_law();
  std::vector<Line> lines;
  // Tokens evicted: one line when the runs evict the same tokens; one per run, tinted
  // by its strategy, when each scheduled the requests its own way.
  const int evicted_lines = s.same_schedule() ? 1 : s.views();
  auto evicted_colour = [&](int v) {
    return evicted_lines == 1 ? palette::kEvictedLine
                              : palette::mix(palette::kEvictedLine, view_colour(s, v), 0.5f);
  };
  for (int v = 0; v < s.views(); ++v) {
    lines.push_back({&f, [v](const Sample& x) { return double(x.run[size_t(v)].freed); }});
    polyline(dl, f, h, lines.back().y, view_colour(s, v), 2.0f, false);
  }
  // Dashed, over the blocks freed: compaction's line lies on it (it frees what was
  // evicted), and drawn solid underneath it was hidden but for its corners.
  for (int v = 0; v < evicted_lines; ++v) {
    lines.push_back({&f, [v](const Sample& x) { return double(x.run[size_t(v)].evicted); }});
    polyline(dl, f, h, lines.back().y, evicted_colour(v), 1.5f, true);
  }
  if (law) {  // last, dashed, over the holes-only line it predicts
    lines.push_back({&f, [](const Sample& x) { return double(x.run[0].expected); }});
    polyline(dl, f, h, lines.back().y, palette::kExpectedLine, 1.5f, true);
  }
  // The key, with the values at the cursor.
  const Counters& c0 = s.view(0).counters();
  std::vector<Key> keys;
  for (int v = 0; v < evicted_lines; ++v) {
    const Timeline& t = s.view(v);
    keys.push_back({evicted_lines == 1 ? std::string("tokens evicted") : "tokens evicted, " + view_title(t.run()),
                    evicted_lines == 1 ? std::string("tokens evicted") : "evicted (" + view_label(t.run()) + ")",
                    percent(t.counters().evicted_fraction()), evicted_colour(v), true});
  }
  for (int v = 0; v < s.views(); ++v) {
    const Timeline& t = s.view(v);
    keys.push_back({"blocks freed, " + view_title(t.run()), "freed (" + view_label(t.run()) + ")",
                    percent(t.counters().blocks_freed_fraction()), view_colour(s, v), false});
  }
  if (law)
    keys.push_back({"law (evicted)^" + std::to_string(c0.block_size) + ": one-shot random, holes",
                    "law (evicted)^" + std::to_string(c0.block_size), percent(c0.expected_freed_fraction()),
                    palette::kExpectedLine, true});
  keys = fitted(std::move(keys), f);
  static KeyPlace placed;
  cursor_line(dl, f, s);
  key_box(dl, key_corner(f, key_size(keys), s, lines, placed), keys);
  seek_on_click(app, f, origin, size, "fraction-chart");
}

// Memory in use against the left axis; the bytes compaction moved (which keep
// growing, and would flatten the memory curve) against their own right axis, or
// against the same one when the two peaks are within 2x (share_axis).
void memory_chart(App& app, ImVec2 origin, ImVec2 size) {
  const Session& s = *app.session;
  const auto& h = s.history();
  double top = 1, moved_top = 0;  // the peaks, in bytes
  for (const Sample& x : h)
    for (const auto& r : x.run) top = std::max(top, r.memory), moved_top = std::max(moved_top, r.moved);
  // The bytes moved on the memory's axis when their ranges are alike, else on their own (right) axis.
  const bool shared = share_axis(top, moved_top);
  if (shared) top = std::max(top, moved_top);
  top = axis_top(top);
  moved_top = shared ? top : moved_top > 0 ? axis_top(moved_top) : 0;
  const bool right_axis = moved_top > 0 && !shared;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  Frame f = plot_area(origin, size, double(s.length()), top);
  if (right_axis) f.b.x -= px(56);  // room for the right axis
  std::vector<std::string> labels;
  for (int i = 0; i <= 4; ++i) labels.push_back(bytes(top * i / 4));
  axes(dl, f, labels);
  if (right_axis) {
    dl->AddRectFilled({f.b.x + px(8), f.a.y - px(4)}, {f.b.x + px(64), f.b.y + px(18)}, palette::kPanel, px(3));
    for (int i = 0; i <= 4; ++i) {
      const float y = f.b.y - (f.b.y - f.a.y) * float(i) / 4;
      dl->AddText({f.b.x + px(8), y - px(7)}, palette::kTextDim, bytes(moved_top * i / 4).c_str());
    }
  }
  Frame moved = f;
  moved.y_max = std::max(moved_top, 1.0);
  std::vector<Line> lines;
  for (int v = 0; v < s.views(); ++v) {
    const uint32_t colour = view_colour(s, v);
    if (s.view(v).moves() > 0) {
      lines.push_back({&moved, [v](const Sample& x) { return x.run[size_t(v)].moved; }});
      polyline(dl, moved, h, lines.back().y, palette::alpha(colour, 0.8f), 1.5f, true);
    }
  }
  for (int v = s.views() - 1; v >= 0; --v) {  // the first view on top: the others would hide it
    const uint32_t colour = view_colour(s, v);
    lines.push_back({&f, [v](const Sample& x) { return x.run[size_t(v)].memory; }});
    polyline(dl, f, h, lines.back().y, colour, 2.0f, false);
  }
  std::vector<Key> keys;
  for (int v = 0; v < s.views(); ++v) {
    const Timeline& t = s.view(v);
    const uint32_t colour = view_colour(s, v);
    keys.push_back({"in use, " + view_title(t.run()), "in use (" + view_label(t.run()) + ")",
                    bytes(double(t.counters().memory_in_use())), colour, false});
    if (t.moves() > 0)
      keys.push_back({std::string(right_axis ? "moved so far (right axis), " : "moved so far, ") + view_title(t.run()),
                      "moved (" + view_label(t.run()) + (right_axis ? "), right axis" : ")"),
                      bytes(double(t.counters().bytes_moved())), colour, true});
  }
  keys = fitted(std::move(keys), f);
  static KeyPlace placed;
  cursor_line(dl, f, s);
  key_box(dl, key_corner(f, key_size(keys), s, lines, placed), keys);
  seek_on_click(app, f, origin, size, "memory-chart");
}

}  // namespace

void draw_charts(App& app, ImVec2 size) {
  const float gap = px(14);
  const float w = (size.x - gap) / 2;
  const ImVec2 o = ImGui::GetCursorScreenPos();
  // Each title over its chart; in a narrow window without ", over the run", and cut at the chart's edge.
  auto title = [&](float x, const std::string& text) {
    const std::string shown = ImGui::CalcTextSize(text.c_str()).x <= w ? text : text.substr(0, text.rfind(", over"));
    ImGui::SetCursorScreenPos({x, o.y});
    ImGui::PushClipRect({x, o.y}, {x + w, o.y + ImGui::GetTextLineHeightWithSpacing()}, true);
    ImGui::TextUnformatted(shown.c_str());
    ImGui::PopClipRect();
  };
  title(o.x, "Tokens evicted and blocks freed, over the run");
  title(o.x + w + gap, "Memory in use and bytes moved, over the run");
  const float chart_top = o.y + ImGui::GetTextLineHeightWithSpacing();
  const float h = std::max(px(40), size.y - (chart_top - o.y));
  // Each chart draws inside its own rectangle: in a narrow window a key wider than
  // its plot is cut at the edge rather than drawn over the other chart.
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->PushClipRect({o.x - 1, chart_top - 1}, {o.x + w + 1, chart_top + h + 1}, true);  // + the edges' anti-aliasing
  fraction_chart(app, {o.x, chart_top}, {w, h});
  dl->PopClipRect();
  dl->PushClipRect({o.x + w + gap - 1, chart_top - 1}, {o.x + 2 * w + gap + 1, chart_top + h + 1}, true);
  memory_chart(app, {o.x + w + gap, chart_top}, {w, h});
  dl->PopClipRect();
  ImGui::SetCursorScreenPos({o.x, chart_top + h});
  ImGui::Dummy({size.x, 0});
}

}  // namespace kvscope::viz
