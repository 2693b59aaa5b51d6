#include "app.h"

#include <algorithm>
#include <chrono>

#include "format.h"
#include "palette.h"
#include "util/error.h"

namespace kvscope::viz {

const char* strategy_title(MemoryStrategy s) {
  switch (s) {
    case MemoryStrategy::HolesOnly: return "holes only";
    case MemoryStrategy::ReuseHoles: return "hole reuse";
    case MemoryStrategy::Compact: return "compaction";
  }
  return "?";
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
  const ModelSource source = model;
  pending = std::async(std::launch::async, [settings, source] {
    Recorded r;
    r.recording = record(settings, source);
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

std::string App::headline() const {
  if (!session) return "kvscope";
  std::string s = (scenario.empty() ? std::string("custom run") : scenario) + ": evicted " +
                  percent(session->view(0).counters().evicted_fraction()) + " \xe2\x80\x94 freed ";
  for (int v = 0; v < session->views(); ++v) {
    const Timeline& t = session->view(v);
    if (v > 0) s += " vs ";
    s += percent(t.counters().blocks_freed_fraction()) + " (" + t.run().label + ")";
  }
  return s;
}

void App::frame(float dt) {
  if (pending.valid() && pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    try {
      adopt(pending.get());
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
  hovered = hover;
  hover = {};
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

  // The headline (the words of headline(), each strategy's number in its colour) and the legend: always on screen.
  if (title_font) ImGui::PushFont(title_font);
  ImGui::Text("%s: evicted %s \xe2\x80\x94 freed", scenario.empty() ? "custom run" : scenario.c_str(),
              percent(session->view(0).counters().evicted_fraction()).c_str());
  for (int v = 0; v < session->views(); ++v) {
    const Timeline& t = session->view(v);
    if (v > 0) {
      ImGui::SameLine();
      ImGui::TextUnformatted("vs");
    }
    ImGui::SameLine();
    ImGui::PushStyleColor(ImGuiCol_Text, palette::strategy(t.run().header.strategy));
    ImGui::Text("%s (%s)", percent(t.counters().blocks_freed_fraction()).c_str(), t.run().label.c_str());
    ImGui::PopStyleColor();
  }
  if (title_font) ImGui::PopFont();
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kTextDim);
  ImGui::TextUnformatted(summary.c_str());
  ImGui::PopStyleColor();
  draw_legend(*this);
  ImGui::Separator();

  const float left = 330;
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::BeginChild("controls", {left, avail.y}, true);
  draw_controls(*this, {left, avail.y});
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("main", {0, avail.y}, false, ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  const float width = ImGui::GetContentRegionAvail().x;
  draw_transport(*this, width);
  const float rest = ImGui::GetContentRegionAvail().y;
  const float spacing = ImGui::GetStyle().ItemSpacing.y;
  const float charts_h = std::max(150.0f, rest * 0.25f);
  const float seq_h = std::max(70.0f, rest * 0.13f);
  const float pool_h = rest - charts_h - seq_h - 2 * spacing;
  const int views = session->views();
  const float gap = 14;
  for (int v = 0; v < views; ++v) {
    if (v > 0) ImGui::SameLine(0, gap);
    draw_pool(*this, v, {(width - gap * float(views - 1)) / float(views), pool_h});
  }
  draw_sequence(*this, {width, seq_h});
  draw_charts(*this, {width, charts_h});
  ImGui::EndChild();
  ImGui::End();
}

}  // namespace kvscope::viz
