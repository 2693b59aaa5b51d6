#include "app.h"

#include <algorithm>
#include <chrono>

#include "palette.h"
#include "util/error.h"
#include "util/format.h"

namespace kvscope::viz {

namespace {
float g_ui_scale = 1;  // as ImGui's style: one per process, set before the first frame
}  // namespace

void set_ui_scale(float scale) { g_ui_scale = scale; }
float ui_scale() { return g_ui_scale; }

void use_app_style() {
  ImGuiStyle& st = ImGui::GetStyle();
  st = ImGuiStyle();  // from ImGui's sizes: scaled once, however often this is called
  ImGui::StyleColorsDark();
  st.WindowRounding = 0;
  st.FrameRounding = 3;
  st.ItemSpacing = {8, 5};
  st.WindowPadding = {10, 8};
  st.Colors[ImGuiCol_WindowBg] = ImGui::ColorConvertU32ToFloat4(palette::kBackground);
  st.Colors[ImGuiCol_ChildBg] = ImGui::ColorConvertU32ToFloat4(palette::kBackground);
  st.Colors[ImGuiCol_Text] = ImGui::ColorConvertU32ToFloat4(palette::kText);
  st.ScaleAllSizes(ui_scale());
}

const char* strategy_title(MemoryStrategy s) {
  switch (s) {
    case MemoryStrategy::HolesOnly: return "holes only";
    case MemoryStrategy::ReuseHoles: return "hole reuse";
    case MemoryStrategy::Compact: return "compaction";
  }
  return "?";
}

uint32_t view_colour(const Session& s, int view) {
  const MemoryStrategy strategy = s.view(view).run().header.strategy;
  const bool shared = view > 0 && s.view(0).run().header.strategy == strategy;
  return shared ? palette::kSecondRun : palette::strategy(strategy);
}

std::string view_title(const Run& run) {
  const std::string title = run.policy == "none" ? "no eviction" : strategy_title(run.header.strategy);
  return run.name.empty() ? title : title + ", " + run.name;
}

App::App(ModelSource model_source) : model(std::move(model_source)) {}

void App::load(const Scenario& s) {
  Recorded r;
  r.recording = record(s.settings, model);
  r.session = std::make_unique<Session>(r.recording.runs);
  scenario = s.name;
  summary = s.summary;
  adopt(std::move(r));
  session->speed = s.speed;
}

void App::load_traces(const std::vector<std::string>& paths) {
  Recorded r;
  r.recording.settings = edit;  // a trace carries no settings: the controls keep theirs, and say so
  r.recording.note = "a recorded trace: the settings below are not its own; Record runs them instead";
  r.recording.runs = load_trace_runs(paths);
  std::string names;
  for (const std::string& path : paths) names += (names.empty() ? "" : " | ") + file_name(path);
  r.session = std::make_unique<Session>(r.recording.runs);
  scenario = names;
  // One summary line; a line each, named, when the two traces were recorded differently.
  const auto& runs = r.recording.runs;
  summary = trace_summary(*runs[0], runs.size() == 2 ? runs[1].get() : nullptr);
  if (runs.size() == 2 && runs[0]->header.meta != runs[1]->header.meta)
    for (size_t i = 0; i < 2; ++i) {
      const std::string line = file_name(paths[i]) + ": " + trace_summary(*runs[i]);
      summary = i == 0 ? line : summary + "\n" + line;
    }
  adopt(std::move(r));
}

void App::load_async(const Scenario& s) {
  if (pending.valid()) return;
  edit = s.settings;
  record_async();
  pending_scenario = s;
}

void App::record_async() {
  if (pending.valid()) return;
  error.clear();
  pending_scenario.reset();
  const RunSettings settings = edit;
  pending_from = edit;
  const ModelSource source = model;
  pending = std::async(std::launch::async, [settings, source, recorder = recorder] {
    Recorded r;
    r.recording = recorder(settings, source);
    r.session = std::make_unique<Session>(r.recording.runs);
    return r;
  });
}

void App::adopt(Recorded r) {
  if (session) {  // keep the playback settings
    r.session->speed = session->speed;
    r.session->animate = session->animate;
  }
  session = std::move(r.session);
  recording = std::move(r.recording);
  edit = recording.settings;
  hover = hovered = {};
  header_reserve = 0;  // the new run's headers
  error.clear();
}

void App::keyboard() {
  const ImGuiIO& io = ImGui::GetIO();
  if (!session || io.WantTextInput) return;
  auto pressed = [](ImGuiKey k, bool repeat) { return ImGui::IsKeyPressed(ImGui::GetKeyIndex(k), repeat); };
  if (pressed(ImGuiKey_Space, false)) session->toggle_play();
  if (pressed(ImGuiKey_RightArrow, true)) session->step(io.KeyShift ? Unit::Round : step_unit, +1);
  if (pressed(ImGuiKey_LeftArrow, true)) session->step(io.KeyShift ? Unit::Round : step_unit, -1);
  if (pressed(ImGuiKey_Home, false)) session->reset();
  if (pressed(ImGuiKey_End, false)) session->seek(session->length());
}

std::vector<App::HeadlinePiece> App::headline_pieces() const {
  if (!session) return {{"kvscope"}};
  auto evicted = [&](int v) { return "evicted " + percent(session->view(v).counters().evicted_fraction()); };
  // A served run is compared by its average: each schedules the requests its own way,
  // so at one moment the runs hold different sequences, each against its own full cache
  // (holes might hold 1 block of 1, compaction 23 of 59: "freed 0%" against "61%").
  auto freed = [&](int v) {
    const Counters& c = session->view(v).counters();
    const std::string label = " (" + view_label(session->view(v).run()) + ")";
    if (c.all_released()) return percent(c.mean_freed_fraction()) + " on average" + label;
    if (session->view(v).run().served() && c.written > 0)
      return percent(c.mean_freed_fraction()) + " on average so far" + label;
    return percent(c.blocks_freed_fraction()) + label;
  };
  bool same_evicted = true;
  for (int v = 1; v < session->views(); ++v) same_evicted = same_evicted && evicted(v) == evicted(0);

  std::string first = scenario.empty() ? std::string("custom run:") : scenario + ":";
  bool written = false;  // by any run yet: before, nothing is evicted or freed ("freed -")
  for (int v = 0; v < session->views(); ++v) written = written || session->view(v).counters().written > 0;
  if (!written) return {{first + " nothing written yet"}};
  if (same_evicted) first.append(" ").append(evicted(0)).append(" \xe2\x80\x94 freed");
  std::vector<HeadlinePiece> pieces{{first}};
  for (int v = 0; v < session->views(); ++v) {
    if (v > 0) pieces.push_back({"vs"});
    pieces.push_back({same_evicted ? freed(v) : evicted(v) + ", freed " + freed(v), v});
  }
  return pieces;
}

std::string App::rule() const {
  if (!session) return "";
  const auto slots = [&](int v) { return std::to_string(session->view(v).occupancy().block_size()); };
  const bool differ = session->views() == 2 && slots(1) != slots(0);  // two traces may differ
  return "A block goes back to the pool only when all " +
         (differ ? "of its slots (" + slots(0) + " in the first view, " + slots(1) + " in the second)"
                 : slots(0) + " of its slots") +
         " are empty: one survivor holds the whole block.";
}

std::string App::headline() const {
  std::string s;
  for (const HeadlinePiece& p : headline_pieces()) s += (s.empty() ? "" : " ") + p.text;
  return s;
}

// A recording started in the background (Record, or a scenario picked) that has
// finished becomes the session; one that failed leaves its message on screen.
void App::adopt_a_finished_recording() {
  if (!pending.valid() || pending.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  try {
    const RunSettings typed = edit;  // the controls changed while it recorded: they keep the change
    const bool edited = !(edit == pending_from);
    adopt(pending.get());
    if (edited) edit = typed;
    if (pending_scenario) {
      scenario = pending_scenario->name;
      summary = pending_scenario->summary;
      session->speed = pending_scenario->speed;
    } else {
      scenario.clear();
      summary = "custom run";
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  pending_scenario.reset();
}

// The headline, each run's numbers in its strategy's colour, the rule behind them,
// then the summary line: always on screen.
void App::draw_headline() {
  if (title_font) ImGui::PushFont(title_font);
  bool first = true;
  for (const HeadlinePiece& p : headline_pieces()) {  // a piece that does not fit starts a new line
    if (!first) same_line_if_fits(ImGui::CalcTextSize(p.text.c_str()).x);
    first = false;
    if (p.view >= 0) ImGui::PushStyleColor(ImGuiCol_Text, view_colour(*session, p.view));
    ImGui::TextUnformatted(p.text.c_str());
    if (p.view >= 0) ImGui::PopStyleColor();
  }
  if (title_font) ImGui::PopFont();
  text_wrapped(rule());
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kTextDim);
  text_wrapped(summary);
  ImGui::PopStyleColor();
}

PanelHeights panel_heights(float rest, float spacing, bool stacked) {
  PanelHeights h;
  h.strip = std::max(px(70), rest * 0.13f);
  h.charts = std::max(px(150), rest * 0.25f);
  h.pools = rest - h.strip - h.charts - 2 * spacing;
  if (h.pools >= rest * (stacked ? 0.6f : 0.5f)) return h;
  h.strip = std::min(px(70), rest * 0.2f);  // too short for all three: no charts
  h.charts = 0;
  h.pools = rest - h.strip - spacing;
  return h;
}

void App::frame(float dt) {
  adopt_a_finished_recording();
  hovered = hover;
  hover = {};
  outlines.clear();
  if (session) session->update(dt);
  keyboard();

  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos({0, 0});
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("kvscope", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoScrollWithMouse);
  if (!session) {
    ImGui::TextUnformatted(error.empty() ? "recording..." : error.c_str());
    ImGui::End();
    return;
  }

  draw_headline();
  draw_legend(*this);
  ImGui::Separator();

  const float left = px(330);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::BeginChild("controls", {left, avail.y}, true);
  draw_controls(*this, {left, avail.y});
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("main", {0, avail.y}, false, ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  const float width = ImGui::GetContentRegionAvail().x;
  draw_transport(*this, width);
  // Two views side by side while each is as wide as its header needs; in a narrower
  // window (a projector's, a window beside a terminal) one above the other.
  const int views = session->views();
  const float gap = px(14);
  float needed = 0;
  for (int v = 0; v < views; ++v) needed = std::max(needed, pool_min_width(*session, v));
  const bool stacked = views > 1 && (width - gap) / 2 < needed;
  const float spacing = ImGui::GetStyle().ItemSpacing.y;
  const PanelHeights h = panel_heights(ImGui::GetContentRegionAvail().y, spacing, stacked);
  for (int v = 0; v < views; ++v) {
    if (stacked) {
      draw_pool(*this, v, {width, (h.pools - spacing * float(views - 1)) / float(views)});
    } else {
      if (v > 0) ImGui::SameLine(0, gap);
      draw_pool(*this, v, {(width - gap * float(views - 1)) / float(views), h.pools});
    }
  }
  draw_sequence(*this, {width, h.strip});
  if (h.charts > 0) draw_charts(*this, {width, h.charts});
  ImGui::EndChild();
  ImGui::End();
}

}  // namespace kvscope::viz
