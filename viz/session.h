// A Session is what the window shows: one run, or two runs of the same
// workload under different memory strategies side by side, moved together.
// The run with compaction moves drives the clock (the primary); the other
// follows it by "logical" events, the ones every strategy shares (a token
// written, a token evicted, a round begun or ended): it is put just before the
// next logical event the primary has not reached. So while the primary slides
// survivors forward, the other shows the same round with its holes. (Served
// requests are scheduled by each strategy its own way, and their logical events
// differ: there the other view is kept at the same share of its own tokens
// written, and both end together.)
//
// The Session also plays: `update(dt)` advances the clock at `speed` events a
// second, and, with `animate`, stops to teach: a short pause when a round
// begins (the policy chooses), a slide of the compaction moves (survivors move
// forward over `slide_seconds`, drawn by interpolating their slots), a pause
// when the round ends. No drawing here.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "run.h"
#include "timeline.h"

namespace kvscope::viz {

// One chart sample: the counters of every run at one primary cursor.
struct Sample {
  size_t x = 0;  // the primary's cursor
  struct PerRun {
    float evicted = 0;   // evicted fraction
    float freed = 0;     // blocks freed fraction
    float expected = 0;  // (evicted fraction)^block_size
    double memory = 0;   // bytes in use
    double moved = 0;    // bytes moved so far
  };
  std::vector<PerRun> run;  // [views]
};

class Session {
 public:
  // One or two runs, shown left to right. Replays each once (throws kvscope::Error).
  explicit Session(std::vector<std::shared_ptr<const Run>> runs);

  int views() const { return int(views_.size()); }
  const Timeline& view(int i) const { return views_[size_t(i)]; }
  int primary() const { return primary_; }
  const Timeline& primary_view() const { return views_[size_t(primary_)]; }

  // Whether the runs are one schedule under different strategies (the same tokens
  // written and evicted), as every synthetic and single-sequence model run is; served
  // requests are scheduled by each strategy its own way, and differ.
  bool same_schedule() const { return same_schedule_; }
  // Whether a token's (sequence, position) in view a names the same token in view b:
  // always within one view; across views only when they ran the same schedule (a
  // served run's preempted request comes back as a new sequence, numbered by its run).
  bool same_token_ids(int a, int b) const { return a == b || same_schedule_; }
  // Whether the (evicted)^block_size law is shown, in the counters and the chart: a
  // one-shot random run with nothing protected (Run::random_one_shot) with a holes-only
  // view, whose blocks freed the law predicts.
  bool shows_law() const;

  // The clock: the primary's cursor.
  size_t cursor() const { return primary_view().cursor(); }
  size_t length() const { return primary_view().size(); }
  void seek(size_t c);           // a jump: stops any slide; nothing flashes
  void step(Unit unit, int dir);  // dir +1 or -1; a Move step forward slides when animating; the flash marks
                                  // what the step applied
  void reset() { playing = false, seek(0); }
  void toggle_play();
  // Shows the compaction batch that starts at or after `from` mid-slide, at t in [0, 1].
  void show_slide(size_t from, double t);

  // Playback.
  bool playing = false;
  double speed = 10000;        // events per second
  bool animate = true;         // pauses between phases and sliding moves
  double phase_pause = 0.3;    // seconds: when a round begins, before its compaction slides, when it ends
  double slide_seconds = 0.65; // a compaction batch's slide
  double move_seconds = 0.3;   // one move's slide (stepping by move)
  void update(double dt);      // advances the clock by dt seconds

  // What the drawing needs for the motion.
  struct Slide {
    int view = -1;
    size_t begin = 0, end = 0;  // the SlotMoved events in flight (not applied yet)
    double t = 0;               // 0 .. 1, linear
    double seconds = 1;
    bool played = false;        // started by playback (a pause holds it), else by a step or show_slide
  };
  const Slide* slide() const { return slide_.view >= 0 ? &slide_ : nullptr; }
  // What view i is doing, in words: its Timeline::phase(), or the slide.
  std::string phase(int i) const;
  // The phase while round `round`'s survivors slide: the longest phase there is.
  static std::string slide_phase(int round);
  float slide_progress() const;  // eased 0 .. 1
  // The events of view i that just happened (to flash): [flash_from(i), cursor).
  size_t flash_from(int i) const { return std::min(flash_[size_t(i)], views_[size_t(i)].cursor()); }
  // The chart series, built once over the whole run.
  const std::vector<Sample>& history() const { return history_; }
  // Different for every Session this process makes: the key of anything drawn from
  // one and kept across frames (a new run may land at the same address).
  uint64_t id() const { return id_; }

 private:
  void play(double dt, double tempo);  // update's playback: seeks the primary view onwards
  void update_flash();
  void follow();  // puts the other views at the primary's logical position
  void mark_flash(const std::vector<size_t>& before);
  void go(size_t c);  // seek without touching the flash
  void clear_flash();  // nothing "just happened"
  void start_slide(size_t begin, size_t end, double seconds, bool played);
  void finish_slide();
  void build_history();
  std::vector<size_t> cursors() const;

  std::vector<Timeline> views_;
  int primary_ = 0;
  bool same_schedule_ = true;  // see same_schedule(); told once, when the runs load
  Slide slide_;
  double pause_left_ = 0;
  size_t paused_before_ = SIZE_MAX;  // the batch whose pause is done
  double budget_ = 0;  // events owed to the clock (fractions carried between frames)
  double clock_ = 0;
  std::vector<size_t> flash_;                              // [view]
  std::deque<std::pair<double, std::vector<size_t>>> trail_;  // (clock, cursors) while playing
  std::vector<Sample> history_;
  uint64_t id_;
};

}  // namespace kvscope::viz
