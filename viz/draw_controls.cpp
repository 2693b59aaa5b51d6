// The left panel (scenario, settings, the counters, what the mouse points at),
// the legend, and the transport bar (play, step, speed, the timeline).
// The counters table prints Counters (counters.h) of each view at the cursor;
// each row's tooltip gives its definition.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <functional>
#include <optional>

#include "app.h"
#include "palette.h"
#include "sim/synthetic.h"
#include "util/format.h"
#include "wrap.h"

namespace kvscope::viz {

namespace {

void heading(const char* text) {
  ImGui::Spacing();
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kTextDim);
  ImGui::TextUnformatted(text);
  ImGui::PopStyleColor();
  ImGui::Separator();
}

bool combo(const char* label, std::string& value, const std::vector<std::string>& items) {
  bool changed = false;
  if (ImGui::BeginCombo(label, value.c_str())) {
    for (const std::string& item : items)
      if (ImGui::Selectable(item.c_str(), item == value)) value = item, changed = true;
    ImGui::EndCombo();
  }
  return changed;
}

bool strategy_combo(const char* label, MemoryStrategy& s) {
  bool changed = false;
  if (ImGui::BeginCombo(label, strategy_title(s))) {
    for (MemoryStrategy m : {MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles, MemoryStrategy::Compact})
      if (ImGui::Selectable(strategy_title(m), m == s)) s = m, changed = true;
    ImGui::EndCombo();
  }
  return changed;
}

void scenario_picker(App& app) {
  heading("SCENARIO");
  ImGui::SetNextItemWidth(-1);
  ImGui::BeginDisabled(app.pending.valid());
  const char* shown = app.pending.valid() ? "recording..." : app.scenario.empty() ? "(custom run)" : app.scenario.c_str();
  if (ImGui::BeginCombo("##scenario", shown)) {
    for (const Scenario& s : scenarios()) {
      if (ImGui::Selectable(s.name.c_str(), s.name == app.scenario)) app.load_async(s);
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", s.summary.c_str());
    }
    ImGui::EndCombo();
  }
  ImGui::EndDisabled();
  if (!app.recording.note.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, palette::kMoving);
    text_wrapped(app.recording.note);
    ImGui::PopStyleColor();
  }
}

// Two small number fields on one line.
void pair(const char* a, int* va, const char* b, int* vb, uint64_t* vb64 = nullptr) {
  ImGui::PushID(a);
  ImGui::SetNextItemWidth(px(64));
  ImGui::InputInt(a, va, 0);
  ImGui::SameLine(0, px(10));
  ImGui::SetNextItemWidth(px(64));
  if (vb)
    ImGui::InputInt(b, vb, 0);
  else
    ImGui::InputScalar(b, ImGuiDataType_U64, vb64);
  ImGui::PopID();
}

// Synthetic workload or the model; switching resets the policy to the first the source offers.
void source_choice(const App& app, RunSettings& e) {
  int source = e.source == Source::Model ? 1 : 0;
  ImGui::RadioButton("synthetic", &source, 0);
  ImGui::SameLine();
  ImGui::BeginDisabled(app.model.dir.empty());
  ImGui::RadioButton("model", &source, 1);
  ImGui::EndDisabled();
  if (app.model.dir.empty() && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("no model: start with --model DIR (assets/model is used when it exists)");
  const Source chosen = source == 1 ? Source::Model : Source::Synthetic;
  if (chosen != e.source) {
    e.source = chosen;
    e.policy = policies_for(chosen).front();
  }
}

// What is run: the workload and its length (synthetic) or the tokens and requests
// (model), then one-shot's evicted share or a streaming schedule, protection, block size.
void run_fields(RunSettings& e) {
  combo("policy", e.policy, policies_for(e.source));
  if (e.source == Source::Synthetic) {
    combo("workload", e.workload, workload_names());
    int mode = e.streaming ? 1 : 0;
    ImGui::RadioButton("one-shot", &mode, 0);
    ImGui::SameLine();
    ImGui::RadioButton("streaming", &mode, 1);
    e.streaming = mode == 1;
    // Several sequences are of different lengths: the field is the first one's (the ID
    // after ### stays, so typing keeps its focus when the label changes).
    ImGui::InputScalar(e.sequences > 1 ? "tokens, seq 0###tokens" : "tokens###tokens", ImGuiDataType_S64, &e.tokens);
    if (ImGui::IsItemHovered() && e.sequences > 1)
      ImGui::SetTooltip("the first sequence's; the others are 0.75, 0.9 and 0.6 times as long (scenarios.cpp)");
    ImGui::SliderInt("sequences", &e.sequences, 1, 4);
  } else {
    ImGui::InputScalar("new tokens", ImGuiDataType_S64, &e.tokens);
    ImGui::SliderInt("requests", &e.sequences, 1, 4);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("2+: served together through a pool too small for all (kvscope serve-bench)");
  }
  if (e.source == Source::Synthetic && !e.streaming) {
    float f = float(e.evict_fraction);
    if (ImGui::SliderFloat("evict", &f, 0.0f, 1.0f, "%.3f")) e.evict_fraction = f;
  } else {
    pair("budget", &e.budget, "slack", &e.slack);
  }
  pair("sinks", &e.sinks, "recent", &e.recent);
  pair("block", &e.block_size, "seed", nullptr, &e.seed);
}

// Typed numbers pulled back into what a run accepts.
void keep_in_range(RunSettings& e) {
  e.tokens = std::clamp<int64_t>(e.tokens, 1, int64_t(1) << 24);
  e.block_size = std::clamp(e.block_size, 1, kMaxBlockSize);
  e.budget = std::max(e.budget, 1);
  e.slack = std::max(e.slack, 1);
  e.sinks = std::max(e.sinks, 0);
  e.recent = std::max(e.recent, 0);
}

// The memory strategy of the first view and, with a second view, of the second one
// (side by side, or below in a narrow window).
void strategy_fields(RunSettings& e) {
  strategy_combo("left", e.strategies[0]);
  bool two = e.strategies.size() == 2;
  if (ImGui::Checkbox("compare with a second view", &two)) {
    if (two) e.strategies.push_back(e.strategies[0] == MemoryStrategy::Compact ? MemoryStrategy::HolesOnly : MemoryStrategy::Compact);
    else e.strategies.resize(1);
  }
  if (e.strategies.size() == 2) strategy_combo("right", e.strategies[1]);
}

void settings(App& app) {
  heading("RUN SETTINGS (then Record)");
  RunSettings& e = app.edit;
  ImGui::PushItemWidth(px(150));
  source_choice(app, e);
  run_fields(e);
  keep_in_range(e);
  strategy_fields(e);
  ImGui::PopItemWidth();
  ImGui::BeginDisabled(app.pending.valid());
  if (ImGui::Button(app.pending.valid() ? "recording..." : "Record", {-1, 0})) app.record_async();
  ImGui::EndDisabled();
  if (!app.error.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, palette::kEvicted);
    text_wrapped(app.error);
    ImGui::PopStyleColor();
  }
}

// One row of the counters table: a label with its definition, a value per view;
// with `only`, "-" in the views of other strategies.
void row(const Session& s, const std::string& label, const char* definition,
         const std::function<std::string(const Counters&)>& value, std::optional<MemoryStrategy> only = {}) {
  ImGui::TableNextRow();
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(label.c_str());
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s\n(viz/counters.h)", definition);
  for (int v = 0; v < s.views(); ++v) {
    ImGui::TableNextColumn();
    const bool shown = !only || s.view(v).run().header.strategy == *only;
    ImGui::TextUnformatted(shown ? value(s.view(v).counters()).c_str() : "-");
  }
}

// The counters at the cursor, a column per view: every number is defined in viz/counters.h.
void counter_table(const Session& s) {
  if (!ImGui::BeginTable("counters", 1 + s.views(), ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_RowBg)) return;
  ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed);  // as wide as its longest label
  for (int v = 0; v < s.views(); ++v)
    ImGui::TableSetupColumn(view_label(s.view(v).run()).c_str(), ImGuiTableColumnFlags_WidthStretch, 1.0f);
  ImGui::TableHeadersRow();
  using C = const Counters&;
  row(s, "tokens written", "SlotWritten events: positions used, all sequences", [](C c) { return commas(c.written); });
  row(s, "live tokens", "written - evicted - released", [](C c) { return commas(c.live()); });
  row(s, "tokens evicted, %", "SlotEvicted events in eviction rounds / tokens written",
      [](C c) { return percent(c.evicted_fraction()); });
  if (s.view(0).run().served())
    row(s, "tokens released", "SlotEvicted events outside rounds: a request finished or preempted, released whole",
        [](C c) { return commas(c.released); });
  row(s, "blocks in use", "blocks owned by a sequence (the replayed Occupancy)",
      [](C c) { return commas(c.blocks_in_use); });
  row(s, "full-cache blocks",
      "ceil(positions used / block size), per sequence not released: the same sequences with no eviction",
      [](C c) { return commas(c.full_cache_blocks); });
  row(s, "blocks freed", "1 - blocks in use / full-cache blocks (- once every sequence is released)",
      [](C c) { return percent(c.blocks_freed_fraction()); });
  if (s.view(0).run().served())
    row(s, "freed, on average",
        "blocks freed, taken at every token written and averaged: the run's summary at its end, "
        "when every request is released",
        [](C c) { return percent(c.mean_freed_fraction()); });
  if (s.shows_law())
    row(s, "law: (evicted)^" + std::to_string(s.view(0).counters().block_size),
        "the chance that all block_size tokens of a block were evicted at random (the power is the block "
        "size): what holes only frees (compaction frees more)",
        [](C c) { return percent(c.expected_freed_fraction()); }, MemoryStrategy::HolesOnly);
  row(s, "memory in use", "blocks in use x block size x K/V bytes per token",
      [](C c) { return bytes(double(c.memory_in_use())); });
  row(s, "reclaimed", "(full-cache blocks - blocks in use) x block size x bytes per token",
      [](C c) { return bytes(double(c.bytes_reclaimed())); });
  row(s, "bytes moved", "SlotMoved events x bytes per token (compaction's copies)",
      [](C c) { return bytes(double(c.bytes_moved())); });
  row(s, "peak blocks", "the most blocks in use so far", [](C c) { return commas(c.peak_blocks); });
  row(s, "rounds done", "RoundEnd events (a round under way is not counted yet)", [](C c) { return commas(c.rounds); });
  ImGui::EndTable();
}

// Under the table, dimmed: what a slot costs, one figure with its factors (Run::token_cost;
// a trace has only the figure), or one per run when two traces of different models are
// shown; and for served runs, the requests preempted in the whole run.
void counter_notes(const Session& s) {
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kTextDim);
  auto cost = [](const Run& r) { return bytes(double(r.bytes_per_token)); };
  const Run& a = s.view(0).run();
  const Run& b = s.view(s.views() - 1).run();
  if (a.bytes_per_token == b.bytes_per_token && a.token_cost == b.token_cost)
    text_wrapped(cost(a) + " per token (K and V, all layers)" + (a.token_cost.empty() ? "" : ": ") + a.token_cost);
  else
    text_wrapped("per token (K and V, all layers): " + view_label(a) + " " + cost(a) + ", " + view_label(b) + " " +
                 cost(b));
  // Each preempted request came back as a new sequence, in a new colour, and wrote its
  // tokens again (the count is the run header's).
  if (a.served()) {
    std::string line;
    for (int v = 0; v < s.views(); ++v) {
      const Run& r = s.view(v).run();
      if (!r.meta("preemptions").empty()) line += (line.empty() ? "" : ", ") + view_label(r) + " " + r.meta("preemptions");
    }
    if (!line.empty()) text_wrapped("requests preempted in the whole run: " + line);
  }
  ImGui::PopStyleColor();
}

void counters(App& app) {
  heading("COUNTERS AT THE CURSOR (hover a name)");
  counter_table(*app.session);
  counter_notes(*app.session);
}

void hover_details(App& app) {
  heading("UNDER THE MOUSE");
  const Hover& h = app.hovered;
  const Session& s = *app.session;
  // An empty slot (free, room or a hole), if it still is: the hover is the last frame's.
  if (!h.token() && h.view >= 0 && h.view < s.views() && h.block >= 0 &&
      s.view(h.view).slot_state(h.block, h.slot) != SlotState::Live) {
    ImGui::Text("%s: block %d, slot %d", view_label(s.view(h.view).run()).c_str(), h.block, h.slot);
    for (const std::string& line : empty_slot_lines(s.view(h.view), h.block, h.slot)) text_wrapped(line);
    return;
  }
  if (!h.token()) {
    ImGui::TextDisabled("hover a slot or a token");
    return;
  }
  if (h.view < 0 || h.view >= s.views()) return;  // the hover is the last frame's, of another run
  ImGui::Text("sequence %d, position %lld", h.seq, (long long)h.pos);
  const std::string& text = s.view(h.view).run().text(h.seq, h.pos);
  if (!text.empty()) ImGui::Text("\"%s\"", text.c_str());
  for (int v = 0; v < s.views(); ++v) {
    if (!s.same_token_ids(h.view, v)) continue;  // its numbers name other tokens there
    const SlotRef r = s.view(v).locate(h.seq, h.pos);
    if (r.block >= 0) ImGui::Text("%s: block %d, slot %d", view_label(s.view(v).run()).c_str(), r.block, r.slot);
  }
}

// Starts a new line when `width` more pixels would not fit on this one.
void wrap(float width) {
  if (ImGui::GetCursorScreenPos().x + width > ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x) ImGui::NewLine();
}

void swatch(const char* label, uint32_t colour, bool outline = false) {
  wrap(px(28) + ImGui::CalcTextSize(label).x);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float h = ImGui::GetTextLineHeight(), m = px(2);  // m: the margin above and below the colour
  if (outline) {
    dl->AddRectFilled({p.x, p.y + m}, {p.x + px(22), p.y + h - m}, palette::kFree);
    dl->AddRect({p.x - px(1), p.y + m - px(1)}, {p.x + px(23), p.y + h - m + px(1)}, colour, 0, 0, px(1.5f));
  } else {
    dl->AddRectFilled({p.x, p.y + m}, {p.x + px(22), p.y + h - m}, colour);
  }
  ImGui::Dummy({px(26), h});
  ImGui::SameLine(0, px(2));
  ImGui::TextUnformatted(label);
  ImGui::SameLine(0, px(18));
}

}  // namespace

void draw_legend(App& app) {
  const Session& s = *app.session;
  swatch("free block", palette::kFree);
  // Sequences of every view: served under holes only, a preempted request comes back
  // as a new sequence, so that view can have more than the primary.
  int owners = 1;
  for (int v = 0; v < s.views(); ++v) owners = std::max(owners, int(s.view(v).final_lengths().size()));
  if (owners == 1) {
    swatch(s.primary_view().run().has_scores() ? "live token (brighter = higher score)" : "live token", palette::live(0, 0, false));
  } else {
    for (int k = 0; k < std::min(owners, palette::kOwnerColours); ++k)
      swatch(palette::owners_label(k, owners).c_str(), palette::live(k, 0, false));
    wrap(ImGui::CalcTextSize("live, by owner").x);
    ImGui::TextUnformatted("live, by owner");
    ImGui::SameLine(0, px(18));
  }
  if (s.primary_view().run().has_scores()) {
    wrap(px(52) + ImGui::CalcTextSize("score low \xe2\x86\x92 high").x);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float h = ImGui::GetTextLineHeight(), w = px(6), m = px(2);  // w: each shade's width
    for (int i = 0; i < 8; ++i)
      dl->AddRectFilled({p.x + float(i) * w, p.y + m}, {p.x + float(i + 1) * w, p.y + h - m},
                        palette::live(0, float(i) / 7, true));
    ImGui::Dummy({px(50), h});
    ImGui::SameLine(0, px(2));
    ImGui::TextUnformatted("score low \xe2\x86\x92 high");
    ImGui::SameLine(0, px(18));
    swatch("not scored yet", palette::unscored(0));
  }
  swatch("hole (emptied, block still held)", palette::kHole);
  swatch("not written yet", palette::kRoom);
  swatch("just written", palette::kWritten);
  swatch("just evicted", palette::kEvicted);
  swatch("moving", palette::kMoving);
  swatch("block given back", palette::kFreedEdge, true);
  swatch("evicted token (sequence)", palette::kSeqEvicted);
  swatch("not written yet (sequence)", palette::kSeqFuture);
  if (s.primary_view().run().served()) swatch("released with its request (sequence)", palette::kSeqReleased);
  ImGui::NewLine();
}

void draw_controls(App& app, ImVec2) {
  scenario_picker(app);
  settings(app);
  counters(app);
  hover_details(app);
  heading("KEYS");
  ImGui::TextDisabled("space play/pause, arrows step,\nshift+arrows a round, Home/End;\n"
                      "click or drag a chart or the timeline: go there");
}

bool fits_after_last_item(float w) {
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  return ImGui::GetItemRectMax().x + ImGui::GetStyle().ItemSpacing.x + w <= right;
}

void same_line_if_fits(float w) {
  if (fits_after_last_item(w)) ImGui::SameLine();
}

void text_wrapped(const std::string& text, float right) {
  if (right < 0) right = ImGui::GetWindowContentRegionMax().x;
  if (const size_t nl = text.find('\n'); nl != std::string::npos) {  // each line of the text wrapped apart
    text_wrapped(text.substr(0, nl), right);
    return text_wrapped(text.substr(nl + 1), right);
  }
  const auto width_of = [](const std::string& s) { return ImGui::CalcTextSize(s.c_str()).x; };
  if (text.empty()) return ImGui::TextUnformatted("");
  size_t i = 0;  // spaces at the start stay (" 880 blocks" after a title); at a break, they go
  while (i < text.size()) {
    const size_t end = fit_words(text, i, right - ImGui::GetCursorPosX(), width_of);
    const size_t next = text.find_first_not_of(' ', end);
    const bool last = next == std::string::npos;
    // Lines of one text sit a line height apart, as in ImGui's own wrapped text.
    if (!last) ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, {ImGui::GetStyle().ItemSpacing.x, 0});
    ImGui::TextUnformatted(text.c_str() + i, text.c_str() + end);  // the next line starts at the left
    if (last) break;
    ImGui::PopStyleVar();
    i = next;
  }
}

void draw_transport(App& app, float width) {
  Session& s = *app.session;
  if (ImGui::Button("|<")) s.reset();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("reset (Home)");
  ImGui::SameLine();
  if (ImGui::Button("<")) s.step(app.step_unit, -1);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("step back (left arrow)");
  ImGui::SameLine();
  if (ImGui::Button(s.playing ? "Pause" : "Play", {px(60), 0})) s.toggle_play();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("space");
  ImGui::SameLine();
  if (ImGui::Button(">")) s.step(app.step_unit, +1);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("step forward (right arrow)");
  ImGui::SameLine();
  static const char* units[] = {"event", "token", "round", "move"};
  int unit = int(app.step_unit);
  ImGui::SetNextItemWidth(px(80));
  if (ImGui::Combo("##unit", &unit, units, 4)) app.step_unit = Unit(unit);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("what one step moves over");
  ImGui::SameLine();
  if (ImGui::Button("round >>")) s.step(Unit::Round, +1);
  ImGui::SameLine();
  ImGui::BeginDisabled(s.primary_view().moves() == 0);
  if (ImGui::Button("move >")) s.step(Unit::Move, +1);
  ImGui::EndDisabled();
  const float speed_width = px(170);
  same_line_if_fits(speed_width + ImGui::GetStyle().ItemInnerSpacing.x + ImGui::CalcTextSize("events/s").x);
  float speed = float(s.speed);
  ImGui::SetNextItemWidth(speed_width);
  if (ImGui::SliderFloat("events/s", &speed, 10.0f, 2e6f, "%.0f", ImGuiSliderFlags_Logarithmic)) s.speed = speed;
  same_line_if_fits(ImGui::GetFrameHeight() + ImGui::GetStyle().ItemInnerSpacing.x + ImGui::CalcTextSize("animate").x);
  ImGui::Checkbox("animate", &s.animate);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("pause between phases and slide the compaction moves");
  // Where the run is. It goes beside the buttons only if the widest it gets in this run
  // fits there (the slide's phase, the last round, the last event): as the phase
  // changes it would otherwise hop between this line and the next, moving the pools.
  const auto where_at = [&](const std::string& phase, size_t event) {
    return phase + "  |  event " + commas(int64_t(event)) + " of " + commas(int64_t(s.length()));
  };
  const int rounds = int(s.primary_view().rounds());
  same_line_if_fits(ImGui::CalcTextSize(where_at(Session::slide_phase(rounds), s.length()).c_str()).x);
  ImGui::TextDisabled("%s", where_at(s.phase(s.primary()), s.cursor()).c_str());
  if (ImGui::IsItemHovered() && s.views() > 1)
    ImGui::SetTooltip("events of the %s run (the one that moves tokens drives the clock), every kind:\n"
                      "writes, evictions, moves, blocks taken and given back, round ends.\n"
                      "The other view is shown at the same point of the run.",
                      view_title(s.primary_view().run()).c_str());

  // The timeline: scrubbing replays the recorded events; ticks mark the rounds.
  uint64_t cursor = s.cursor();
  const uint64_t lo = 0, hi = s.length();
  ImGui::SetNextItemWidth(width);
  if (ImGui::SliderScalar("##timeline", ImGuiDataType_U64, &cursor, &lo, &hi, "")) s.seek(size_t(cursor));
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const auto& ends = s.primary_view().round_end_events();
  if (ends.size() <= 2000)
    for (size_t e : ends) {
      const float x = a.x + (b.x - a.x) * float(double(e + 1) / double(std::max<size_t>(1, s.length())));
      dl->AddLine({x, b.y - px(5)}, {x, b.y}, palette::alpha(palette::kText, 0.5f), px(1));
    }
}

}  // namespace kvscope::viz
