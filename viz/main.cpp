// kvscope-viz: the desktop app, and its headless screenshot mode.
//
//   kvscope-viz [--scenario NAME] [--model DIR]                  a window
//   kvscope-viz --trace FILE[,FILE]                              a recorded run (kvscope ... --trace), or two side by side
//   kvscope-viz --screenshot FILE.png --scenario NAME [--frames N] [--size WxH] [--at WHERE] [--play] [--verify]
//   kvscope-viz --list-scenarios | --bench-frame | --help
//
// Both modes run the same frame code (app.cpp); the screenshot renders into an
// offscreen framebuffer of the requested size and writes it with stb_image_write.
// OpenGL needs a display: under Xvfb (`xvfb-run -a kvscope-viz --screenshot ...`)
// Mesa renders in software.
#include <CLI/CLI.hpp>
#include <GLFW/glfw3.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "app.h"
#include "cli/option_values.h"
#include "cli/parse_error.h"
#include "imgui_impl_glfw.h"
#include "imgui_internal.h"  // the tooltips' rectangles, for --verify (tooltip_rects)
#include "imgui_impl_opengl3.h"
#include "evict/triattention.h"
#include "model/config.h"
#include "palette.h"
#include "screenshot.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"
#include "util/threads.h"

namespace kvscope::viz {

namespace {

constexpr float kMinScale = 0.5f, kMaxScale = 4.0f;  // --scale
constexpr int kDesignWidth = 1600, kDesignHeight = 1000;  // the default window and picture at scale 1

// The default window or picture at `scale`: 1600x1000 times it, in whole pixels.
void design_size(float scale, int& width, int& height) {
  width = int(std::lround(kDesignWidth * scale)), height = int(std::lround(kDesignHeight * scale));
}

struct Args {
  std::string scenario;
  std::vector<std::string> traces;  // recorded runs to show instead of a scenario
  bool list = false;
  std::string model;
  std::string calibration;
  std::string screenshot;
  int frames = 3;
  std::string size = "1600x1000";
  bool size_given = false;  // --size on the command line (else a window is sized to the scale and the screen)
  float scale = 0;          // --scale; 0: the monitor's content scale in a window, 1 in a screenshot
  std::string at;
  bool play = false;
  bool verify = false;
  bool bench = false;
  std::string mouse;  // screenshot: "X,Y" where the mouse points (tooltips, highlights)
};

// Every failure: one line on stderr and exit code 1.
[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "kvscope-viz: error: %s\n", message.c_str());
  std::exit(1);
}

void parse_size(const std::string& s, int& w, int& h) {
  int used = 0;  // the whole text, not a prefix: "800x600x3" is an error, not 800x600
  if (std::sscanf(s.c_str(), "%dx%d%n", &w, &h, &used) != 2 || size_t(used) != s.size() || w < 200 || h < 150 ||
      w > 16384 || h > 16384)
    fail("--size must be WIDTHxHEIGHT between 200x150 and 16384x16384, got \"" + s + "\"");
}

// --at: where the clock stands for a screenshot.
void place(Session& s, const std::string& at) {
  const Timeline& p = s.primary_view();
  auto number = [&](const std::string& text) {
    try {
      size_t used = 0;
      const double v = std::stod(text, &used);
      if (used != text.size()) throw std::invalid_argument(text);
      return v;
    } catch (const std::exception&) {
      fail("--at: \"" + at + "\" is not start, end, round:K, event:N, P% or compacting:T[:K]");
    }
  };
  // A number from low to high (a whole one when `whole`), else fail with `range`.
  auto in_range = [&](const std::string& text, double low, double high, bool whole, const std::string& range) {
    const double v = number(text);
    if (!(v >= low && v <= high) || (whole && v != std::floor(v))) fail("--at " + at + ": " + range);  // NaN too
    return v;
  };
  if (at.empty() && s.view(0).run().served()) {  // its end has released every request: two empty pools
    s.seek(s.length() / 2);
  } else if (at.empty() || at == "end") {
    s.seek(s.length());
  } else if (at == "start") {
    s.seek(0);
  } else if (at.rfind("round:", 0) == 0) {
    const auto& ends = p.round_end_events();
    const std::string range =
        "the run has " + plural(int64_t(ends.size()), "round") + ", numbered from 1";
    const size_t k = size_t(in_range(at.substr(6), 1, double(ends.size()), true, range));
    s.seek(ends[k - 1] + 1);
  } else if (at.rfind("event:", 0) == 0) {
    const std::string n = std::to_string(s.length());
    const std::string range = "the run has " + n + " events: event:0 (the start) to event:" + n + " (the end)";
    s.seek(size_t(in_range(at.substr(6), 0, double(s.length()), true, range)));
  } else if (!at.empty() && at.back() == '%') {
    const double percent = in_range(at.substr(0, at.size() - 1), 0, 100, false, "a percentage from 0 to 100");
    s.seek(size_t(percent / 100 * double(s.length())));
  } else if (at.rfind("compacting:", 0) == 0) {
    std::vector<size_t> batches;  // where the search for each compaction batch starts, in order
    for (size_t from = 0; p.next_batch(from).first < p.size(); from = p.next_batch(from).second) batches.push_back(from);
    if (batches.empty()) fail("--at " + at + ": the run has no compaction batch");
    std::string rest = at.substr(11);
    size_t k = 1;
    if (const size_t colon = rest.find(':'); colon != std::string::npos) {
      const std::string range = "the run has " + std::to_string(batches.size()) +
                                (batches.size() == 1 ? " compaction batch" : " compaction batches") + ", numbered from 1";
      k = size_t(in_range(rest.substr(colon + 1), 1, double(batches.size()), true, range));
      rest = rest.substr(0, colon);
    }
    const double t = in_range(rest, 0, 1, false, "T, how far the batch has slid, is from 0 to 1");
    s.show_slide(batches[k - 1], t);
  } else {
    number(at);  // fails with the list of forms
  }
}

// DejaVu Sans when the system has it (Debian: fonts-dejavu-core), with the
// punctuation and arrows the app writes; ImGui's built-in font otherwise. Both at
// the UI scale (set_ui_scale first).
void fonts(App& app) {
  ImGuiIO& io = ImGui::GetIO();
  static const ImWchar ranges[] = {0x0020, 0x00FF, 0x2010, 0x2027, 0x2190, 0x21FF, 0x2212, 0x2264, 0x25A0, 0x25FF, 0};
  for (const char* path : {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"}) {
    if (!file_exists(path)) continue;
    io.Fonts->AddFontFromFileTTF(path, px(15), nullptr, ranges);
    app.title_font = io.Fonts->AddFontFromFileTTF(path, px(22), nullptr, ranges);
    return;
  }
  ImFontConfig config;
  config.SizePixels = std::round(px(13));  // the built-in font's own size, scaled
  io.Fonts->AddFontDefault(&config);
}

ModelSource model_source(const Args& a) {
  ModelSource m;
  m.dir = a.model.empty() ? bundled_model_dir() : a.model;
  m.calibration = a.calibration;
  try {
    if (!m.dir.empty()) check_model_folder(m.dir);
    // Read now, whichever scenario opens: the policy menu can switch to triattention
    // later, and a file that cannot be used should not wait until then to say so.
    if (!m.calibration.empty()) {
      if (m.dir.empty()) TriCalibration::load(m.calibration);
      else TriCalibration::load(m.calibration, load_config(m.dir));
    }
  } catch (const Error& e) {
    fail(e.what());
  }
  return m;
}

const Scenario& choose_scenario(const Args& a, const ModelSource& m) {
  if (!a.scenario.empty()) {
    return *find_scenario(a.scenario);  // known: run() checked the name
  }
  if (!m.dir.empty()) return *find_scenario("h2o-model");
  std::fprintf(stderr,
               "kvscope-viz: no model (assets/model is not there yet; --model DIR runs one): "
               "showing the synthetic blog-16k-random\n");
  return *find_scenario("blog-16k-random");
}

// --bench-frame: CPU time to build one frame (no GPU, no display): ImGui's
// draw lists for a pool of 4,096 blocks x 16 slots, then a 1M-token run.
int bench() {
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  io.DisplaySize = {1600, 1000};
  io.BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;  // as the OpenGL 3 renderer does: draw lists past 64K vertices
  App app({});
  fonts(app);
  unsigned char* pixels = nullptr;
  int w = 0, h = 0;
  io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);
  use_app_style();
  auto time_frames = [&](const char* what, const RunSettings& settings) {
    const double t0 = now_seconds();
    Recording rec = record(settings, {});
    const double rec_s = now_seconds() - t0;
    app.session = std::make_unique<Session>(rec.runs);
    app.recording = std::move(rec);
    const double load_s = now_seconds() - t0 - rec_s;
    app.session->seek(app.session->length());  // the end: after eviction, holes scattered everywhere
    double total = 0, worst = 0;
    const int n = 60;
    for (int i = 0; i < n + 5; ++i) {
      const double f0 = now_seconds();
      io.DeltaTime = 1.0f / 60;
      ImGui::NewFrame();
      app.frame(0);
      ImGui::Render();
      const double ms = 1e3 * (now_seconds() - f0);
      if (i >= 5) total += ms, worst = std::max(worst, ms);
    }
    int blocks = 0;
    for (int v = 0; v < app.session->views(); ++v) blocks += app.session->view(v).occupancy().num_blocks();
    std::printf("%-44s %9s blocks  record %6.2f s  replay+chart %5.2f s  frame %6.2f ms (worst %.2f)\n", what,
                commas(blocks).c_str(), rec_s, load_s, total / n, worst);
  };
  std::printf("kvscope-viz --bench-frame: CPU time to build a 1600x1000 frame (ImGui draw lists, no rendering)\n");
  RunSettings one;
  one.tokens = 4096 * 16;
  one.strategies = {MemoryStrategy::HolesOnly};
  time_frames("4,096 blocks x 16 slots, holes only", one);
  one.strategies = {MemoryStrategy::HolesOnly, MemoryStrategy::Compact};
  time_frames("the same, holes | compact side by side", one);
  RunSettings big;
  big.streaming = true;
  big.tokens = 1000000;
  big.budget = 2048;
  big.slack = 512;
  big.sinks = 4;
  big.recent = 32;
  time_frames("1M tokens streaming, holes | compact", big);
  ImGui::DestroyContext();
  return 0;
}

// The mouse of --mouse X,Y (pixels of the picture), or nowhere.
ImVec2 mouse_position(const Args& a, int width, int height) {
  ImVec2 mouse{-FLT_MAX, -FLT_MAX};
  if (a.mouse.empty()) return mouse;
  int used = 0;
  if (std::sscanf(a.mouse.c_str(), "%f,%f%n", &mouse.x, &mouse.y, &used) != 2 || size_t(used) != a.mouse.size() ||
      !std::isfinite(mouse.x) || !std::isfinite(mouse.y))
    fail("--mouse must be X,Y in pixels, got \"" + a.mouse + "\"");
  if (!(mouse.x >= 0 && mouse.x < width && mouse.y >= 0 && mouse.y < height))
    fail("--mouse " + a.mouse + " is outside the " + std::to_string(width) + "x" + std::to_string(height) +
         " picture: X from 0 to " + std::to_string(width - 1) + ", Y from 0 to " + std::to_string(height - 1));
  return mouse;
}

// The primary monitor's content scale: how much the desktop enlarges what it draws
// (2 on a 4K laptop set to 200%); 1 where it says nothing. Kept in --scale's range.
float monitor_scale() {
  float x = 1, y = 1;
  if (GLFWmonitor* m = glfwGetPrimaryMonitor()) glfwGetMonitorContentScale(m, &x, &y);
  const float s = std::max(x, y);
  return std::isfinite(s) ? std::clamp(s, kMinScale, kMaxScale) : 1.0f;
}

// A window without --size: the design's 1600x1000 at the UI scale, cut to the primary
// monitor's work area (the screen less its panels) where it does not fit there (a
// 1366x768 laptop; 1440x900 at twice the scale). Returns whether it was cut: such a
// window opens maximised, as a window that fills the screen should.
bool window_size_for_screen(int& width, int& height) {
  design_size(ui_scale(), width, height);
  int x = 0, y = 0, w = 0, h = 0;
  if (GLFWmonitor* m = glfwGetPrimaryMonitor()) glfwGetMonitorWorkarea(m, &x, &y, &w, &h);
  if (w <= 0 || h <= 0 || (width <= w && height <= h)) return false;
  width = std::min(width, w), height = std::min(height, h);
  return true;
}

// One line on the window opened: its size and UI scale, and where each came from.
void say_window(const Args& a, GLFWwindow* window, bool maximised) {
  int width = 0, height = 0;
  glfwGetWindowSize(window, &width, &height);
  std::printf("kvscope-viz: window %dx%d, UI scale %s (%s)", width, height, fmt("%g", ui_scale()).c_str(),
              a.scale > 0 ? "--scale" : "the desktop's scaling; --scale sets it");
  if (maximised) {
    design_size(ui_scale(), width, height);
    std::printf("; maximised: %dx%d does not fit the screen", width, height);
  }
  std::printf("\n");
  std::fflush(stdout);
}

// A GLFW window with an OpenGL 3 context (a hidden 64x64 one for a screenshot, which
// draws into its own framebuffer), and Dear ImGui set up on it at the UI scale:
// --scale, else 1 for a screenshot (the same picture on every machine) and the
// monitor's content scale for a window, which without --size is sized to match.
GLFWwindow* open_window(App& app, const Args& a, int& width, int& height, bool headless) {
  glfwSetErrorCallback([](int, const char* what) { std::fprintf(stderr, "kvscope-viz: GLFW: %s\n", what); });
  if (!glfwInit())
    fail("cannot open the display for OpenGL; without a desktop run "
         "`xvfb-run -a kvscope-viz --screenshot FILE.png ...`");
  set_ui_scale(a.scale > 0 ? a.scale : headless ? 1.0f : monitor_scale());
  const bool maximised = !headless && !a.size_given && window_size_for_screen(width, height);
  if (maximised) glfwWindowHint(GLFW_MAXIMIZED, GLFW_TRUE);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 2);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
  if (headless) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  const std::string title = "kvscope-viz: " + app.scenario;
  GLFWwindow* window = glfwCreateWindow(headless ? 64 : width, headless ? 64 : height, title.c_str(), nullptr, nullptr);
  const char* glsl = "#version 150";
  if (!window) {  // no 3.2 core profile: try whatever the driver gives
    glfwDefaultWindowHints();
    if (headless) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
    if (maximised) glfwWindowHint(GLFW_MAXIMIZED, GLFW_TRUE);
    window = glfwCreateWindow(headless ? 64 : width, headless ? 64 : height, title.c_str(), nullptr, nullptr);
    glsl = "#version 130";
  }
  if (!window) fail("cannot create an OpenGL 3 window");
  if (!headless) say_window(a, window, maximised);
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);

  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;
  fonts(app);
  use_app_style();
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init(glsl);
  return window;
}

void close_window(GLFWwindow* window) {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
}

// The frame ImGui built, drawn into the bound framebuffer on the background colour.
void render(int width, int height) {
  glViewport(0, 0, width, height);
  const ImVec4 bg = ImGui::ColorConvertU32ToFloat4(palette::kBackground);
  glClearColor(bg.x, bg.y, bg.z, 1);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

// The tooltips of the frame just rendered, as screen rectangles: --verify does not read
// the slots under them (--mouse on a slot shows one over the pool). ImGui's public API
// has no way to list windows, so this reads its context (imgui_internal.h).
std::vector<App::Rect> tooltip_rects() {
  std::vector<App::Rect> out;
  for (const ImGuiWindow* w : ImGui::GetCurrentContext()->Windows)
    if (w->Active && (w->Flags & ImGuiWindowFlags_Tooltip))
      out.push_back({w->Pos, {w->Pos.x + w->Size.x, w->Pos.y + w->Size.y}});
  return out;
}

// --screenshot: --frames frames into an offscreen framebuffer (playing at 60 frames a
// second with --play, else standing still), the last one written as a PNG; with
// --verify, read back and checked. The exit code.
int write_screenshot(App& app, const Args& a, int width, int height, ImVec2 mouse) {
  ImGuiIO& io = ImGui::GetIO();
  Offscreen target;
  if (const std::string err = target.create(width, height); !err.empty()) fail(err);
  if (a.play) app.session->toggle_play();
  LogProgress log;  // many frames, or huge ones, take a while: say how far it got every 10 s
  for (int f = 0; f < a.frames; ++f) {
    if (log.due()) std::fprintf(stderr, "kvscope-viz: frame %d of %d\n", f + 1, a.frames);
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    io.DisplaySize = {float(width), float(height)};
    io.DisplayFramebufferScale = {1, 1};
    io.DeltaTime = 1.0f / 60;
    io.MousePos = mouse;
    ImGui::NewFrame();
    app.frame(a.play ? 1.0f / 60 : 0.0f);
    ImGui::Render();
    target.bind();
    render(width, height);
  }
  glFinish();
  const std::vector<App::Rect> tooltips = tooltip_rects();
  if (const std::string err = write_png(a.screenshot, target.read(), width, height); !err.empty()) fail(err);
  target.unbind();
  std::printf("%s\nwrote %s (%dx%d, %s)\n", app.headline().c_str(), a.screenshot.c_str(), width, height,
              app.session->phase(app.session->primary()).c_str());
  if (!a.verify) return 0;
  int w = 0, h = 0;
  const std::vector<uint8_t> back = read_png(a.screenshot, w, h);
  if (back.empty() || w != width || h != height) fail(a.screenshot + ": cannot read the PNG back");
  bool ok = false;
  std::fputs(app.verify(back, w, h, tooltips, ok).c_str(), stdout);
  std::fflush(stdout);  // the report first, then the error under it
  if (!ok) fail("--verify: failed (the lines above say why)");
  return 0;
}

// The window until it is closed, at most 60 frames a second.
void run_window(App& app, const Args& a, GLFWwindow* window) {
  if (a.at.empty()) app.session->toggle_play();  // from the start; with --at, paused there
  auto last = std::chrono::steady_clock::now();
  while (!glfwWindowShouldClose(window)) {
    // At most 60 frames a second, even where the swap does not wait for the screen (Xvfb).
    std::this_thread::sleep_until(last + std::chrono::microseconds(16000));
    last = std::chrono::steady_clock::now();
    // Idle (paused, nothing moving, nothing recording): wait for input instead of spinning.
    const bool busy = app.session->playing || app.session->slide() || app.pending.valid();
    if (busy)
      glfwPollEvents();
    else
      glfwWaitEventsTimeout(0.25);
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    app.frame(std::min(ImGui::GetIO().DeltaTime, 0.1f));
    ImGui::Render();
    int fw = 0, fh = 0;
    glfwGetFramebufferSize(window, &fw, &fh);
    render(fw, fh);
    glfwSwapBuffers(window);
  }
}

// A screenshot shows the one run it loads: a model or a calibration file that run never
// reads would be dropped without a word. (In a window the settings can switch to them.)
void check_used_by_the_screenshot(const Args& a) {
  const Scenario* s = a.scenario.empty() ? nullptr : find_scenario(a.scenario);
  const std::string shown = !a.traces.empty() ? "a trace"
                            : s               ? "scenario " + s->name
                                              : "the default scenario";  // h2o-model with a model
  const bool reads_model = a.traces.empty() && (!s || s->settings.source == Source::Model);
  const bool reads_calibration = reads_model && s && s->settings.policy == "triattention";
  if (!a.model.empty() && !reads_model)
    fail("--model has no effect on this screenshot: " + shown + " runs no model (the model scenarios do: "
         "--list-scenarios)");
  if (!a.calibration.empty() && !reads_calibration)
    fail("--calibration has no effect on this screenshot: " + shown +
         " does not evict with TriAttention (--scenario triattention-model does)");
}

// What it printed (the headline, "wrote FILE.png", a timing table, the help) went to
// standard output: a write that failed there (a full disk, say) is not exit code 0.
void check_output_written() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) fail("standard output: write failed (disk full?)");
}

int run(const Args& a) {
  if (a.list) {
    for (const Scenario& s : scenarios()) std::printf("%-20s %s\n", s.name.c_str(), s.summary.c_str());
    return 0;
  }
  if (a.bench) return bench();
  int width = kDesignWidth, height = kDesignHeight;
  parse_size(a.size, width, height);
  const bool headless = !a.screenshot.empty();
  if (headless && !a.size_given && a.scale > 0)  // the default picture at the scale asked for
    design_size(a.scale, width, height);
  if (a.verify && !headless) fail("--verify checks a screenshot: give --screenshot FILE.png");
  if (headless) {  // before the scenario is recorded; a picture over a trace or model file would destroy it
    std::vector<NamedPath> inputs = {{"--calibration", a.calibration}};
    for (const std::string& t : a.traces) inputs.emplace_back("--trace", t);
    check_outputs_apart({{"--screenshot", a.screenshot}}, inputs, a.model.empty() ? bundled_model_dir() : a.model);
    check_writable(a.screenshot);
  }
  if (!a.scenario.empty() && !find_scenario(a.scenario))  // a typo first: no display would not help it
    fail("unknown scenario \"" + a.scenario + "\" (kvscope-viz --list-scenarios lists them)");
  if (headless) check_used_by_the_screenshot(a);
  if (!headless && !std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY"))
    fail("no display (DISPLAY is not set): write a picture with --screenshot FILE.png (under `xvfb-run -a "
         "kvscope-viz --screenshot FILE.png ...`), or run the window under xvfb-run or on a desktop");

  const ModelSource model = model_source(a);
  App app(model);
  if (!a.traces.empty()) {
    app.load_traces(a.traces);  // kvscope::Error naming the file
    if (headless) {  // the tokenizer a trace's header led to is read too: no picture over it
      std::vector<NamedPath> read;
      for (const auto& run : app.recording.runs)
        read.emplace_back("the tokenizer of the trace's model", run->tokenizer_json);
      check_outputs_apart({{"--screenshot", a.screenshot}}, read);
    }
  } else {
    const Scenario& scenario = choose_scenario(a, model);
    try {
      app.load(scenario);
    } catch (const Error& e) {
      fail(std::string("scenario ") + scenario.name + ": " + e.what());
    }
    if (!app.recording.note.empty()) std::fprintf(stderr, "kvscope-viz: %s\n", app.recording.note.c_str());
  }

  // Where the clock stands, and where the mouse points: checked before a display is opened.
  if (headless || !a.at.empty()) place(*app.session, a.play && a.at.empty() ? "start" : a.at);
  if (a.play && app.session->cursor() >= app.session->length())  // refused, not rewound to the start unasked
    fail("--play from --at " + (a.at.empty() ? "start" : a.at) +
         ": that is the end of the run, where nothing is left to play");
  const ImVec2 mouse = mouse_position(a, width, height);

  GLFWwindow* window = open_window(app, a, width, height, headless);
  int code = 0;
  if (headless)
    code = write_screenshot(app, a, width, height, mouse);
  else
    run_window(app, a, window);
  close_window(window);
  return code;
}

}  // namespace

}  // namespace kvscope::viz

int main(int argc, char** argv) {
  using namespace kvscope::viz;
  Args a;
  CLI::App cli(
      "kvscope-viz: watch eviction scatter the survivors of a paged KV cache, and compaction give whole blocks back.\n"
      "Opens a window (Dear ImGui + GLFW + OpenGL 3). Without a display, write a picture instead:\n"
      "  xvfb-run -a kvscope-viz --screenshot out.png --scenario blog-16k-random --size 1600x1000\n"
      "Keys: space play/pause, left/right step (shift: a round), Home/End.",
      "kvscope-viz");
  cli.add_option("--scenario", a.scenario,
                 "A named preset (--list-scenarios); default h2o-model when a model is found, else blog-16k-random");
  cli.add_flag("--list-scenarios", a.list, "List the scenarios and exit");
  cli.add_option("--trace", a.traces,
                 "Show a recorded run instead of a scenario: a trace written by kvscope generate, simulate or "
                 "serve-bench --trace; two (comma-separated) side by side, e.g. holes and compact")
      ->delimiter(',')
      ->excludes("--scenario");
  cli.add_option("--model", a.model,
                 "Model folder for the model scenarios (config.json, *.safetensors, tokenizer.json); "
                 "default assets/model when it exists; without one the model scenarios show a synthetic stand-in. "
                 "tests/models/tiny-tied works but has random weights: its attention is near-uniform, so the model "
                 "views mean something only with a trained model. A screenshot of a run that reads no model refuses "
                 "it");
  cli.add_option("--calibration", a.calibration,
                 "TriAttention's calibration file (kvscope calibrate); default DIR/triattention-calibration.json. "
                 "A screenshot of a run that does not evict with TriAttention refuses it");
  // The screenshot-only options are refused without --screenshot (the window would ignore them).
  CLI::Option* shot = cli.add_option("--screenshot", a.screenshot,
                                     "Render headless and write this PNG (needs OpenGL: use xvfb-run -a without a display)")
                          ->check(kvscope::cli::kFileName);
  cli.add_option("--frames", a.frames, "Screenshot: frames to render before writing (default 3)")
      ->check(kvscope::cli::number_check(1, false, 100000, "1..100000"))
      ->needs(shot);
  CLI::Option* size = cli.add_option(
      "--size", a.size,
      "WIDTHxHEIGHT in pixels of the window or the screenshot (default 1600x1000 at the UI scale; a window that "
      "would not fit the screen opens maximised)");
  cli.add_option("--scale", a.scale,
                 "UI scale: text and spacing this many times their size (default: the desktop's scaling, e.g. 2 on "
                 "a 4K screen at 200%, for a window; 1 for a screenshot)")
      ->check(kvscope::cli::number_check(kMinScale, false, kMaxScale, "0.5..4"));
  cli.add_option("--at", a.at,
                 "Where the clock stands: end (a screenshot's default; a served run's is 50%, as its end has "
                 "released every request), start, round:K (after round K), event:N, "
                 "P% (of the run), compacting:T[:K] (the K-th compaction batch, sliding, T in 0..1); the window "
                 "opens there, paused");
  cli.add_flag("--play", a.play, "Screenshot: play from --at (default start) for the frames, 60 frames a second")
      ->needs(shot);
  cli.add_flag("--verify", a.verify,
               "Screenshot: read the PNG back and check every pool slot's colour against the replayed cache "
               "(free, live, hole, not written yet, with the fading flashes of what just happened blended off; slots "
               "under a --mouse tooltip or outline, and a view whose survivors are sliding, are counted, not checked, "
               "and a frame with nothing to check fails) "
               "and, with --play, that the sequence strip shows the newest written token it scrolled to (as of the "
               "frame before: a scroll shows a frame later) on whole lines inside the picture; exit 1 on any "
               "mismatch")
      ->needs(shot);
  cli.add_option("--mouse", a.mouse, "Screenshot: put the mouse at X,Y (pixels) to show a tooltip and the highlights")
      ->needs(shot);
  cli.add_flag("--bench-frame", a.bench, "Print the CPU time to build frames of a 4,096-block pool and a 1M-token run");
  try {
    kvscope::cli::check_option_values(cli, argc, argv);
    cli.parse(argc, argv);
    a.size_given = size->count() > 0;
    // These two do nothing else: another option beside them would be ignored.
    for (const char* alone : {"--list-scenarios", "--bench-frame"})
      if (cli.count(alone))
        for (const CLI::Option* o : cli.get_options())
          if (o->count() > 0 && o->get_name() != alone)
            throw kvscope::Error(std::string(alone) + " takes no other option, but " + o->get_name() + " was given");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help: print it, exit 0 once it is written
      cli.exit(e);
      check_output_written();
      return 0;
    }
    fail(kvscope::cli::parse_error_text(e, cli) + " (--help lists the options)");
  } catch (const kvscope::Error& e) {
    fail(e.what());
  }
  try {  // the threads the model scenarios' parallel loops start
    const std::string warning = kvscope::check_openmp_default("lower it or unset it");
    if (!warning.empty()) std::fprintf(stderr, "kvscope-viz: warning: %s\n", warning.c_str());
  } catch (const kvscope::Error& e) {
    fail(e.what());
  }
  int code = 0;
  try {
    code = run(a);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  check_output_written();
  return code;
}
