#include "timeline.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "util/error.h"

namespace kvscope::viz {

namespace {

// Snapshots cost one Occupancy each; keep them under ~96 MB per run.
constexpr double kSnapshotBytes = 96e6;
constexpr size_t kMinSnapshotInterval = 4096;

bool is_logical(EventKind k) {
  return k == EventKind::SlotWritten || k == EventKind::SlotEvicted || k == EventKind::RoundBegin ||
         k == EventKind::RoundEnd;
}

// The cursor just after the first index in `list` at or after `from`; `none` if there is none.
size_t after_next(const std::vector<size_t>& list, size_t from, size_t none) {
  const auto it = std::lower_bound(list.begin(), list.end(), from);
  return it == list.end() ? none : *it + 1;
}

}  // namespace

// ---- Timeline ------------------------------------------------------------------

Timeline::Timeline(std::shared_ptr<const Run> run)
    : run_(std::move(run)),
      occ_(run_->header),
      counters_(run_->header.block_size, run_->bytes_per_token),
      used_(size_t(run_->header.num_blocks) * size_t(run_->header.block_size), 0) {
  build_index();
  const double occ_bytes = double(run_->header.num_blocks) * (double(run_->header.block_size) * 9 + 32) + 1024;
  const size_t max_snapshots = size_t(std::clamp(kSnapshotBytes / occ_bytes, 2.0, 64.0));
  const size_t interval = std::max(kMinSnapshotInterval, size() / max_snapshots + 1);
  snapshots_.push_back({0, occ_, counters_, used_, false, false});
  // One replay of the whole run: checks every event (Occupancy throws with the
  // event's description) and leaves snapshots along the way.
  for (size_t i = 0; i < size(); ++i) {
    try {
      apply(event(i));
    } catch (const Error& e) {  // its message starts with the event, described
      throw Error("run \"" + run_->label + "\": event " + std::to_string(i) + ": " + e.what());
    }
    note_policy_eviction(i);  // once checked: a trace's position could be anything (2^62 was a 2^62-entry table)
    if (cursor_ % interval == 0) snapshots_.push_back({cursor_, occ_, counters_, used_, in_round_, moved_in_round_});
  }
  final_lengths_ = counters_.next_pos;
  seek(0);
}

// Event i, applied: a SlotEvicted inside its sequence's round is the policy's (an
// eviction leaves in_round as it was).
void Timeline::note_policy_eviction(size_t i) {
  const Event& e = event(i);
  const size_t seq = size_t(e.seq);
  if (e.kind != EventKind::SlotEvicted || seq >= counters_.in_round.size() || !counters_.in_round[seq]) return;
  if (seq >= evicted_in_round_.size()) evicted_in_round_.resize(seq + 1);
  std::vector<size_t>& at = evicted_in_round_[seq];
  if (size_t(e.pos) >= at.size()) at.resize(size_t(e.pos) + 1, SIZE_MAX);
  at[size_t(e.pos)] = i;
}

bool Timeline::evicted_by_policy(int seq, int64_t pos) const {
  if (seq < 0 || size_t(seq) >= evicted_in_round_.size() || pos < 0) return false;
  const std::vector<size_t>& at = evicted_in_round_[size_t(seq)];
  return size_t(pos) < at.size() && at[size_t(pos)] < cursor_;
}

TokenState Timeline::token_state(int seq, int64_t pos) const {
  if (pos >= counters_.next_position(seq)) return TokenState::Future;
  if (locate(seq, pos).block >= 0) return TokenState::Live;
  // Evicted by a round, as the caption counts it, even once its sequence is released.
  if (evicted_by_policy(seq, pos)) return TokenState::Evicted;
  const std::vector<uint8_t>& released = counters_.released_seq;
  return seq < int(released.size()) && released[size_t(seq)] ? TokenState::Released : TokenState::Evicted;
}

SlotState Timeline::slot_state(int block, int slot) const {
  if (occ_.owner(block) < 0) return SlotState::Free;
  if (occ_.position(block, slot) != kEmpty) return SlotState::Live;
  return used(block, slot) ? SlotState::Hole : SlotState::Room;
}

void Timeline::build_index() {
  const EventLog& ev = run_->events;
  for (size_t i = 0; i < ev.size(); ++i) {
    switch (ev[i].kind) {
      case EventKind::SlotWritten: writes_.push_back(i); break;
      case EventKind::RoundBegin: round_begins_.push_back(i); break;
      case EventKind::RoundEnd: round_ends_.push_back(i); break;
      case EventKind::SlotMoved:
        moves_.push_back(i);
        if (i == 0 || ev[i - 1].kind != EventKind::SlotMoved) batch_starts_.push_back(i);
        break;
      default: break;
    }
    if (is_logical(ev[i].kind)) logical_.push_back(i);
  }
}

void Timeline::apply(const Event& e) {
  occ_.apply(e);
  counters_.count(e, occ_);
  const size_t B = size_t(occ_.block_size());
  if (e.kind == EventKind::BlockAllocated) std::fill_n(used_.begin() + long(size_t(e.block) * B), B, uint8_t(0));
  if (e.kind == EventKind::SlotWritten || e.kind == EventKind::SlotMoved) used_[size_t(e.block) * B + size_t(e.slot)] = 1;
  if (e.kind == EventKind::RoundBegin) in_round_ = true, moved_in_round_ = false;
  if (e.kind == EventKind::RoundEnd) in_round_ = false;
  if (e.kind == EventKind::SlotMoved) moved_in_round_ = true;
  ++cursor_;
}

void Timeline::seek(size_t to) {
  to = std::min(to, size());
  if (to == cursor_) return;
  // The last snapshot at or before `to`: needed to go back, and a shortcut forward.
  const auto it = std::upper_bound(snapshots_.begin(), snapshots_.end(), to,
                                   [](size_t c, const Snapshot& s) { return c < s.cursor; });
  const Snapshot& s = *(it - 1);
  if (to < cursor_ || s.cursor > cursor_) {
    occ_ = s.occ;
    counters_ = s.counters;
    used_ = s.used;
    in_round_ = s.in_round;
    moved_in_round_ = s.moved_in_round;
    cursor_ = s.cursor;
  }
  while (cursor_ < to) apply(event(cursor_));
}

size_t Timeline::next(Unit unit, size_t from) const {
  switch (unit) {
    case Unit::Event: return std::min(from + 1, size());
    case Unit::Token: return after_next(writes_, from, size());
    case Unit::Round: return after_next(round_ends_, from, size());
    case Unit::Move: return after_next(moves_, from, size());
  }
  return size();
}

size_t Timeline::prev(Unit unit, size_t from) const {
  if (from == 0) return 0;
  const std::vector<size_t>* list = nullptr;
  switch (unit) {
    case Unit::Event: return from - 1;
    case Unit::Token: list = &writes_; break;
    case Unit::Round: list = &round_ends_; break;
    case Unit::Move: list = &moves_; break;
  }
  // The last such event before the one at from - 1.
  const auto it = std::lower_bound(list->begin(), list->end(), from - 1);
  // By move, from just after a move, back is just before it: from a batch's first,
  // that is the pause before the batch slides, where the step forward came from
  // (not just after the batch before).
  if (unit == Unit::Move && it != list->end() && *it == from - 1) return from - 1;
  return it == list->begin() ? 0 : *(it - 1) + 1;
}

// (kind, sequence, position) of each logical event, with each run of evictions
// sorted: the cache evicts a round's tokens in slot order, and under hole reuse
// slot order is not token order.
std::vector<std::tuple<EventKind, int32_t, int64_t>> Timeline::logical_keys() const {
  std::vector<std::tuple<EventKind, int32_t, int64_t>> keys;
  for (size_t i : logical_) keys.emplace_back(event(i).kind, event(i).seq, event(i).pos);
  for (auto it = keys.begin(); it != keys.end();) {
    const auto is_eviction = [](const auto& k) { return std::get<0>(k) == EventKind::SlotEvicted; };
    const auto first = std::find_if(it, keys.end(), is_eviction);
    it = std::find_if_not(first, keys.end(), is_eviction);
    std::sort(first, it);
  }
  return keys;
}

bool Timeline::same_logical_events(const Timeline& other) const {
  return logical_.size() == other.logical_.size() && logical_keys() == other.logical_keys();
}

size_t Timeline::logical_count(size_t cursor) const {
  return size_t(std::lower_bound(logical_.begin(), logical_.end(), cursor) - logical_.begin());
}

size_t Timeline::write_count(size_t cursor) const {
  return size_t(std::lower_bound(writes_.begin(), writes_.end(), cursor) - writes_.begin());
}

size_t Timeline::cursor_for_write(size_t n) const {
  return n < writes_.size() ? cursor_for_logical(logical_count(writes_[n])) : size();
}

size_t Timeline::cursor_for_logical(size_t n) const {
  if (n == 0) return 0;
  if (n >= logical_.size()) return size();
  // Just before the next logical event, with what followed the last one (the
  // blocks its evictions freed) but not the block allocated for the next token.
  size_t c = logical_[n];
  while (c > logical_[n - 1] + 1 && event(c - 1).kind == EventKind::BlockAllocated) --c;
  return c;
}

std::pair<size_t, size_t> Timeline::next_batch(size_t from) const {
  const auto it = std::lower_bound(batch_starts_.begin(), batch_starts_.end(), from);
  if (it == batch_starts_.end()) return {size(), size()};
  size_t end = *it;
  while (end < size() && event(end).kind == EventKind::SlotMoved) ++end;
  return {*it, end};
}

size_t Timeline::next_stop(size_t from) const {
  size_t stop = size();
  for (const auto* list : {&round_begins_, &round_ends_, &batch_starts_}) {
    const auto it = std::lower_bound(list->begin(), list->end(), from);
    if (it != list->end()) stop = std::min(stop, *it);
  }
  return stop;
}

std::string Timeline::phase() const {
  const std::string round = "round " + std::to_string(round_number());
  if (in_round_ && moved_in_round_) return round + ": compacting";
  if (in_round_) {  // evicting until the round's evictions are done; a run that compacts moves next
    const size_t next = logical_count(cursor_);
    const bool evicting = next < logical_.size() && event(logical_[next]).kind == EventKind::SlotEvicted;
    return round + (evicting ? ": evicting" : ": evicted");
  }
  if (cursor_ == 0) return "start";
  if (cursor_ == size()) return "end";
  if (event(cursor_ - 1).kind == EventKind::RoundEnd) return "round " + std::to_string(counters_.rounds) + " done";
  return "writing tokens";
}

SlotRef Timeline::locate(int seq, int64_t pos) const {
  if (located_at_ != cursor_) {
    where_.assign(counters_.next_pos.size(), {});
    for (size_t s = 0; s < where_.size(); ++s) where_[s].assign(size_t(counters_.next_pos[s]), SlotRef{});
    const int B = occ_.block_size();
    for (int b = 0; b < occ_.num_blocks(); ++b) {
      const int owner = occ_.owner(b);
      if (owner < 0 || occ_.live_in_block(b) == 0) continue;
      for (int j = 0; j < B; ++j) {
        const int64_t p = occ_.position(b, j);
        if (p != kEmpty && owner < int(where_.size()) && p < int64_t(where_[size_t(owner)].size()))
          where_[size_t(owner)][size_t(p)] = {b, j};
      }
    }
    located_at_ = cursor_;
  }
  if (seq < 0 || seq >= int(where_.size()) || pos < 0 || pos >= int64_t(where_[size_t(seq)].size())) return {};
  return where_[size_t(seq)][size_t(pos)];
}

ScoresAt scores_for_shading(const Timeline& t) {
  ScoresAt scores(t.run(), t.cursor(), t.counters().next_pos);
  if (!scores.known()) return scores;
  const Occupancy& occ = t.occupancy();
  const size_t slots = size_t(occ.num_blocks()) * size_t(occ.block_size());
  const size_t stride = std::max<size_t>(1, slots / 8192);
  std::vector<std::pair<int, int64_t>> live;  // (seq, pos)
  for (size_t i = 0; i < slots; i += stride) {
    const int b = int(i / size_t(occ.block_size())), j = int(i % size_t(occ.block_size()));
    if (occ.owner(b) >= 0 && occ.position(b, j) != kEmpty) live.emplace_back(occ.owner(b), occ.position(b, j));
  }
  scores.fit(live);
  return scores;
}

}  // namespace kvscope::viz
