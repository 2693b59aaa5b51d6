// Fuzz target: a trace file, read and then replayed: by the core's checker
// (kvscope::replay), then as kvscope-viz plays a file it is given (load_trace_run,
// a Timeline, and the seeks and steps of its controls). Each step either succeeds
// or throws kvscope::Error; anything else (a crash, a huge allocation, another
// exception) is a bug.
#include <algorithm>
#include <cstddef>

#include "cache/occupancy.h"
#include "cache/trace.h"
#include "fuzz_util.h"
#include "run.h"
#include "timeline.h"
#include "util/error.h"

namespace {

// What the app's controls and views ask of a timeline: seek to the end and back, step
// each unit forward and back (a bounded number of steps, so one input stays fast),
// and, at each stop, the counters, the phase, the scores, what each slot and token is,
// and where each token sits.
void play(kvscope::viz::Timeline& t) {
  using kvscope::viz::Unit;
  const auto look = [&t] {
    (void)t.phase();
    (void)kvscope::viz::scores_for_shading(t);
    (void)t.counters().blocks_freed_fraction();
    const kvscope::Occupancy& occ = t.occupancy();
    for (int block = 0; block < std::min(occ.num_blocks(), 64); ++block)
      for (int slot = 0; slot < occ.block_size(); ++slot) (void)t.slot_state(block, slot);
    const auto& lengths = t.final_lengths();
    for (size_t seq = 0; seq < std::min<size_t>(lengths.size(), 4); ++seq)
      for (int64_t pos = 0; pos < std::min<int64_t>(lengths[seq], 64); ++pos) {
        (void)t.locate(int(seq), pos);
        (void)t.evicted_by_policy(int(seq), pos);
        (void)t.token_state(int(seq), pos);
      }
  };
  t.seek(t.size());
  look();
  t.seek(t.size() / 2);
  look();
  for (Unit unit : {Unit::Event, Unit::Token, Unit::Round, Unit::Move}) {
    size_t at = 0;
    for (int step = 0; step < 32 && at < t.size(); ++step) {
      at = t.next(unit, at);
      t.seek(at);
      look();
    }
    for (int step = 0; step < 32 && at > 0; ++step) t.seek(at = t.prev(unit, at));
  }
  (void)t.cursor_for_logical(t.logical_count(t.size()) / 2);
  (void)t.cursor_for_write(t.write_count(t.size()) / 2);
  (void)t.next_stop(0);
  (void)t.next_batch(0);
  (void)t.same_logical_events(t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kvscope::fuzz::input_file(data, size, "run.trace");
  try {
    const kvscope::Trace t = kvscope::read_trace(path);
    kvscope::trace_token_ids(t.header, path);  // "tokens.S" lists, when the header has them
    kvscope::replay(t.header, t.events);       // checks every event, and that the stream is finished
  } catch (const kvscope::Error&) {
  }
  try {
    kvscope::viz::Timeline timeline(kvscope::viz::load_trace_run(path));
    play(timeline);
  } catch (const kvscope::Error&) {
  }
  return 0;
}
