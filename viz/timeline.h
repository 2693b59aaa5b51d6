// Timeline and Session: moving through recorded runs. No drawing here.
//
// A Timeline holds one recorded Run and a cursor: the number of its events
// applied so far. The state at the cursor is an Occupancy (cache/occupancy.h)
// replayed from the events, and the Counters (counters.h) counted from them.
// Moving forward applies events; moving back restores the nearest snapshot
// before the target and replays from there, so any cursor shows exactly what
// a replay from the start would.
//
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
// when the round ends.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "cache/occupancy.h"
#include "counters.h"
#include "run.h"

namespace kvscope::viz {

// What one step moves over.
enum class Unit {
  Event,  // one event
  Token,  // to just after the next token written
  Round,  // to just after the next round's end
  Move,   // to just after the next compaction move
};

class Timeline {
 public:
  explicit Timeline(std::shared_ptr<const Run> run);  // replays once (checks the events; throws kvscope::Error)

  const Run& run() const { return *run_; }
  std::shared_ptr<const Run> run_ptr() const { return run_; }
  size_t size() const { return run_->events.size(); }
  size_t cursor() const { return cursor_; }  // events applied, 0 .. size()
  const Occupancy& occupancy() const { return occ_; }
  const Counters& counters() const { return counters_; }
  const Event& event(size_t i) const { return run_->events[i]; }

  // Puts the cursor at `to` (clamped to size()).
  void seek(size_t to);

  // The cursor one step of `unit` forward from `from` (just after the next such
  // event), or back (just after the previous such event before the one at
  // from - 1; 0 when none).
  size_t next(Unit unit, size_t from) const;
  size_t prev(Unit unit, size_t from) const;

  // Logical events (written, evicted, round begin/end): the same list under every
  // memory strategy of one schedule, for keeping two runs in step.
  size_t logical_count(size_t cursor) const;   // logical events among the first `cursor`
  size_t cursor_for_logical(size_t n) const;   // just before the (n+1)-th logical event
  size_t logical_size() const { return logical_.size(); }
  // Whether `other` has the same logical events: kind, sequence and position, one
  // by one, except that the tokens of one run of evictions may come in any order.
  bool same_logical_events(const Timeline& other) const;
  // Tokens written (SlotWritten events): among the first `cursor`, in the whole run,
  // and the cursor just before the (n+1)-th of them (size() when there is none).
  size_t write_count(size_t cursor) const;
  size_t write_total() const { return writes_.size(); }
  size_t cursor_for_write(size_t n) const;
  size_t moves() const { return moves_.size(); }  // SlotMoved events in the run
  size_t rounds() const { return round_ends_.size(); }
  const std::vector<size_t>& round_end_events() const { return round_ends_; }
  // Per sequence, the positions it has used by the end of the run.
  const std::vector<int64_t>& final_lengths() const { return final_lengths_; }

  // Compaction batches: the runs of consecutive SlotMoved events.
  // The batch that starts at or after `from`: [begin, end); {size, size} if none.
  std::pair<size_t, size_t> next_batch(size_t from) const;
  // The next event at or after `from` where playback stops to teach: a round's
  // begin or end, or the first move of a batch. size() if none.
  size_t next_stop(size_t from) const;

  // The round the cursor is in (1-based), 0 before the first; and what it is doing.
  int round_number() const { return counters_.rounds + (in_round_ ? 1 : 0); }
  bool in_round() const { return in_round_; }
  std::string phase() const;  // "writing tokens", "round 3: evicting", "round 3: evicted", "round 3: compacting", ...

  // Whether the slot has held a token since its block was allocated: an empty
  // slot that has is a hole (evicted, or moved away); one that has not is room
  // the sequence has not written yet (the tail of its last block).
  bool used(int block, int slot) const { return used_[size_t(block) * size_t(occ_.block_size()) + size_t(slot)] != 0; }

  // Where each live token sits: the slot of (seq, pos), or {-1, -1} when not live.
  // Built from the occupancy on first use after the cursor moves.   O(slots)
  SlotRef locate(int seq, int64_t pos) const;

 private:
  struct Snapshot {
    size_t cursor;
    Occupancy occ;
    Counters counters;
    std::vector<uint8_t> used;
    bool in_round;
    bool moved_in_round;
  };
  void apply(const Event& e);
  void build_index();
  std::vector<std::tuple<EventKind, int32_t, int64_t>> logical_keys() const;

  std::shared_ptr<const Run> run_;
  Occupancy occ_;
  Counters counters_;
  std::vector<uint8_t> used_;  // [num_blocks * block_size] see used()
  size_t cursor_ = 0;
  bool in_round_ = false;
  bool moved_in_round_ = false;
  std::vector<Snapshot> snapshots_;  // ascending cursors, the first at 0
  std::vector<int64_t> final_lengths_;

  // Event indices by kind, ascending.
  std::vector<size_t> writes_, round_begins_, round_ends_, moves_, batch_starts_, logical_;

  mutable size_t located_at_ = SIZE_MAX;          // the cursor `where_` was built for
  mutable std::vector<std::vector<SlotRef>> where_;  // [seq][pos]
};

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

  // The clock: the primary's cursor.
  size_t cursor() const { return primary_view().cursor(); }
  size_t length() const { return primary_view().size(); }
  void seek(size_t c);           // stops any slide; the flash marks what the jump applied
  void step(Unit unit, int dir);  // dir +1 or -1; a Move step forward slides when animating
  void reset() { playing = false, seek(0); }
  void toggle_play();
  void clear_flash();  // nothing "just happened" (for still screenshots)
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
  };
  const Slide* slide() const { return slide_.view >= 0 ? &slide_ : nullptr; }
  // What view i is doing, in words: its Timeline::phase(), or the slide.
  std::string phase(int i) const;
  float slide_progress() const;  // eased 0 .. 1
  bool pausing() const { return pause_left_ > 0; }
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
  void start_slide(size_t begin, size_t end, double seconds);
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
