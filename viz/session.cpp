#include "session.h"

#include <algorithm>
#include <atomic>

#include "util/error.h"

namespace kvscope::viz {

Session::Session(std::vector<std::shared_ptr<const Run>> runs) {
  static std::atomic<uint64_t> sessions{0};  // runs are recorded on a background thread
  id_ = ++sessions;
  if (runs.empty() || runs.size() > 2) throw Error("a session shows one or two runs");
  for (auto& r : runs) views_.emplace_back(std::move(r));
  // The clock follows the run with compaction moves: the others wait while it slides.
  size_t most = 0;
  for (int i = 0; i < views(); ++i)
    if (views_[size_t(i)].moves() > most) most = views_[size_t(i)].moves(), primary_ = i;
  for (const Timeline& v : views_) same_schedule_ = same_schedule_ && v.same_logical_events(primary_view());
  flash_.assign(views_.size(), 0);
  build_history();
  seek(0);
}

bool Session::shows_law() const {
  if (!view(0).run().random_one_shot()) return false;  // the law's figure is view 0's
  for (const Timeline& t : views_)
    if (t.run().header.strategy == MemoryStrategy::HolesOnly && t.run().random_one_shot()) return true;
  return false;
}

std::vector<size_t> Session::cursors() const {
  std::vector<size_t> c;
  for (const Timeline& t : views_) c.push_back(t.cursor());
  return c;
}


// The other views go to the same moment. One schedule under two memory strategies
// writes and evicts the same tokens, so the same count of logical events is the
// same moment. Served requests are scheduled by each strategy its own way
// (preemptions, recomputed tokens), and the lists differ: there the moment is the
// same share of each run's tokens written, and the end is the end.
void Session::follow() {
  const Timeline& p = primary_view();
  const bool same = same_schedule();
  for (int i = 0; i < views(); ++i) {
    if (i == primary_) continue;
    Timeline& v = views_[size_t(i)];
    if (same)
      v.seek(v.cursor_for_logical(p.logical_count(cursor())));
    else if (cursor() >= p.size() || p.write_total() == 0)
      v.seek(v.size());
    else
      v.seek(v.cursor_for_write(p.write_count(cursor()) * v.write_total() / p.write_total()));
  }
}

void Session::mark_flash(const std::vector<size_t>& before) {
  for (int i = 0; i < views(); ++i) flash_[size_t(i)] = std::min(before[size_t(i)], views_[size_t(i)].cursor());
  trail_.clear();
}

void Session::go(size_t c) {
  slide_.view = -1;
  pause_left_ = 0;
  paused_before_ = SIZE_MAX;  // played again from here, a batch pauses before it slides
  views_[size_t(primary_)].seek(c);
  follow();
}

void Session::seek(size_t c) {
  go(c);
  clear_flash();
}

void Session::step(Unit unit, int dir) {
  const std::vector<size_t> before = cursors();
  if (slide_.view >= 0) {  // forward completes the slide; back returns to before it (its moves unapplied)
    if (dir > 0) finish_slide();
    else go(slide_.begin);
    mark_flash(before);
    return;
  }
  const Timeline& p = primary_view();
  if (dir < 0) {
    go(p.prev(unit, cursor()));
    mark_flash(before);
    return;
  }
  const size_t target = p.next(unit, cursor());
  if (unit == Unit::Move && animate && target > 0 && target <= p.size() &&
      p.event(target - 1).kind == EventKind::SlotMoved) {
    go(target - 1);
    start_slide(target - 1, target, move_seconds, /*played=*/false);
    mark_flash(before);
    return;
  }
  go(target);
  mark_flash(before);
}

void Session::toggle_play() {
  if (!playing && cursor() >= length()) seek(0);
  playing = !playing;
  budget_ = 0;
  if (playing) trail_.clear();  // a pause keeps it: what just happened fades as at the end
}

void Session::clear_flash() {
  flash_ = cursors();
  trail_.clear();
}

void Session::show_slide(size_t from, double t) {
  const auto [begin, end] = primary_view().next_batch(from);
  if (begin >= end) return;
  seek(begin);
  start_slide(begin, end, slide_seconds, /*played=*/false);
  slide_.t = std::clamp(t, 0.0, 1.0);
}

void Session::start_slide(size_t begin, size_t end, double seconds, bool played) {
  slide_ = {primary_, begin, end, 0.0, std::max(seconds, 1e-3), played};
}

void Session::finish_slide() {
  const size_t end = slide_.end;
  slide_.view = -1;
  views_[size_t(primary_)].seek(end);
  follow();
}

std::string Session::slide_phase(int round) {
  return "round " + std::to_string(round) + ": compacting, survivors slide forward";
}

std::string Session::phase(int i) const {
  const Timeline& t = views_[size_t(i)];
  if (slide_.view == i) return slide_phase(t.round_number());
  return t.phase();
}

float Session::slide_progress() const {
  const double t = std::clamp(slide_.t, 0.0, 1.0);
  return float(t * t * (3 - 2 * t));  // smoothstep: starts and lands gently
}

void Session::update(double dt) {
  clock_ += dt;
  // Fast playback shortens the pauses (down to nothing) and the slides (not below 0.15 s).
  const double tempo = std::min(1.0, 20000.0 / std::max(speed, 1.0));
  if (slide_.view >= 0) {
    if (playing || !slide_.played) slide_.t += dt / slide_.seconds;  // a pause holds playback's slide
    if (slide_.t >= 1) finish_slide();
  } else if (playing && pause_left_ > 0) {
    pause_left_ -= dt;
  } else if (playing) {
    play(dt, tempo);
  }
  update_flash();
}

// Spends the events the clock owes, up to the next stop: the first move of a
// compaction batch (a pause, then the batch slides) or a round's edge (a pause).
void Session::play(double dt, double tempo) {
  budget_ = std::min(budget_ + speed * dt, speed * 0.25 + 1);  // no burst after a slow frame
  Timeline& p = views_[size_t(primary_)];
  while (budget_ >= 1 && p.cursor() < p.size()) {
    const size_t c = p.cursor();
    const size_t stop = animate ? p.next_stop(c) : p.size();
    if (stop > c) {
      const size_t n = std::min<size_t>(size_t(budget_), stop - c);
      p.seek(c + n);
      follow();
      budget_ -= double(n);
      continue;
    }
    // At a stop: the first move of a batch slides; a round's begin or end pauses.
    const Event& e = p.event(c);
    if (e.kind == EventKind::SlotMoved && paused_before_ != c) {  // a breath between evicting and compacting
      paused_before_ = c;
      pause_left_ = phase_pause * tempo;
      budget_ = 0;
      break;
    }
    if (e.kind == EventKind::SlotMoved) {
      const auto [begin, end] = p.next_batch(c);
      start_slide(begin, end, std::max(0.15, slide_seconds * tempo), /*played=*/true);
      budget_ = 0;
      break;
    }
    p.seek(c + 1);
    follow();
    budget_ -= 1;
    if (e.kind == EventKind::RoundBegin || (e.kind == EventKind::RoundEnd && c + 1 < p.size())) {
      pause_left_ = phase_pause * tempo;
      budget_ = 0;
      break;
    }
  }
  if (p.cursor() >= p.size() && slide_.view < 0) playing = false;
}

// What happened in the last 0.3 s flashes. When the clock stops (a pause, the end),
// that fades out over 0.3 s too; a step's flash (mark_flash, no trail) stays until
// the next.
void Session::update_flash() {
  if (!playing && slide_.view < 0 && trail_.empty()) return;
  trail_.emplace_back(clock_, cursors());
  while (trail_.size() > 1 && trail_[1].first <= clock_ - 0.3) trail_.pop_front();
  flash_ = trail_.front().second;
  if (!playing && slide_.view < 0 && flash_ == cursors()) trail_.clear();
}

void Session::build_history() {
  Timeline& p = views_[size_t(primary_)];
  const size_t n = p.size();
  std::vector<size_t> xs;
  constexpr size_t kEven = 1200;
  for (size_t k = 0; k <= kEven; ++k) xs.push_back(n * k / kEven);
  // The edges of every round and batch, so steps show sharp (when there are not too many).
  std::vector<size_t> edges;
  for (size_t c = 0; c < n && edges.size() <= 4000;) {
    const size_t s = p.next_stop(c);
    if (s >= n) break;
    edges.push_back(s);
    edges.push_back(s + 1);
    const auto [b, e] = p.next_batch(s);
    if (b == s) edges.push_back(e);
    c = s + 1;
  }
  if (edges.size() <= 4000) xs.insert(xs.end(), edges.begin(), edges.end());
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());

  history_.clear();
  history_.reserve(xs.size());
  for (size_t x : xs) {
    if (x > n) continue;
    p.seek(x);
    follow();
    Sample s;
    s.x = x;
    for (const Timeline& t : views_) {
      const Counters& c = t.counters();
      s.run.push_back({float(c.evicted_fraction()), float(c.blocks_freed_fraction()),
                       float(c.expected_freed_fraction()), double(c.memory_in_use()), double(c.bytes_moved())});
    }
    history_.push_back(std::move(s));
  }
}

}  // namespace kvscope::viz
