// The visualiser's model (viz/): the timeline replays recorded runs exactly,
// steps land where they say, two strategies stay in step, and the counters the
// app shows agree with simulate() at the end of a run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "cache/occupancy.h"
#include "cache/trace.h"
#include "own_temp_dir.h"
#include "prose_numbers.h"  // docs::numbers, as the doc test reads prose
#include "run_kvscope.h"
#include "sim/synthetic.h"
#include "tokenizer/tokenizer.h"  // Tokenizer, read_text_file
#include "util/file.h"
#include "util/format.h"
#include "util/error.h"
#include "scenarios.h"
#include "session.h"
#include "timeline.h"

namespace kvscope::viz {
namespace {

// Everything an Occupancy shows, compared slot by slot.
void expect_same(const Occupancy& a, const Occupancy& b) {
  ASSERT_EQ(a.num_blocks(), b.num_blocks());
  ASSERT_EQ(a.block_size(), b.block_size());
  EXPECT_EQ(a.blocks_in_use(), b.blocks_in_use());
  for (int blk = 0; blk < a.num_blocks(); ++blk) {
    ASSERT_EQ(a.owner(blk), b.owner(blk)) << "block " << blk;
    ASSERT_EQ(a.live_in_block(blk), b.live_in_block(blk)) << "block " << blk;
    for (int s = 0; s < a.block_size(); ++s) ASSERT_EQ(a.position(blk, s), b.position(blk, s)) << blk << "/" << s;
  }
  EXPECT_EQ(a.num_sequences(), b.num_sequences());
  for (int q = 0; q < a.num_sequences(); ++q) EXPECT_EQ(a.live(q), b.live(q));
}

void expect_same(const Counters& a, const Counters& b) {
  EXPECT_EQ(a.written, b.written);
  EXPECT_EQ(a.evicted, b.evicted);
  EXPECT_EQ(a.moved, b.moved);
  EXPECT_EQ(a.rounds, b.rounds);
  EXPECT_EQ(a.blocks_in_use, b.blocks_in_use);
  EXPECT_EQ(a.full_cache_blocks, b.full_cache_blocks);
}

RunSettings small_one_shot() {
  RunSettings s;  // the blog's run, smaller
  s.tokens = 2000;
  s.evict_fraction = 0.875;
  return s;
}

RunSettings small_streaming(const std::string& policy = "random", const std::string& workload = "uniform") {
  RunSettings s;
  s.streaming = true;
  s.tokens = 1500;
  s.budget = 128;
  s.slack = 32;
  s.sinks = 4;
  s.recent = 16;
  s.policy = policy;
  s.workload = workload;
  return s;
}

TEST(VizTimeline, StepForwardThenBackRestoresTheOccupancy) {
  const Recording rec = record(small_streaming(), {});
  ASSERT_EQ(rec.runs.size(), 2u);
  for (const auto& run : rec.runs) {
    Timeline t(run);
    std::mt19937 rng(7);
    for (int trial = 0; trial < 40; ++trial) {
      const size_t at = std::uniform_int_distribution<size_t>(0, t.size())(rng);
      t.seek(at);
      const Occupancy before = t.occupancy();
      const Counters counted = t.counters();
      std::vector<bool> used;
      for (int b = 0; b < before.num_blocks(); ++b)
        for (int j = 0; j < before.block_size(); ++j) used.push_back(t.used(b, j));
      const int k = std::uniform_int_distribution<int>(1, 50)(rng);
      for (int i = 0; i < k; ++i) t.seek(t.next(Unit::Event, t.cursor()));
      for (int i = 0; i < k && t.cursor() > 0; ++i) t.seek(t.prev(Unit::Event, t.cursor()));
      if (at + size_t(k) > t.size()) t.seek(at);  // the end clamps the steps forward
      ASSERT_EQ(t.cursor(), at);
      expect_same(t.occupancy(), before);
      expect_same(t.counters(), counted);
      for (int b = 0; b < before.num_blocks(); ++b)
        for (int j = 0; j < before.block_size(); ++j) ASSERT_EQ(t.used(b, j), used[size_t(b * before.block_size() + j)]);
      // And the same as a fresh replay of that many events.
      expect_same(t.occupancy(), replay(run->header, run->events, at));
    }
  }
}

// A trace whose policy eviction names a position far past anything written (a flipped
// bit) is refused by the replay, naming the event: it once sized a table by that
// position first (2 GB for 2^28, std::bad_alloc further up).
TEST(VizTimeline, AnEvictionOfAPositionNeverWrittenIsAnErrorNotAnAllocation) {
  const Recording rec = record(small_streaming(), {});
  auto run = std::make_shared<viz::Run>(*rec.runs[0]);
  bool in_round = false, changed = false;
  for (Event& e : run->events) {
    if (e.kind == EventKind::RoundBegin) in_round = true;
    if (in_round && e.kind == EventKind::SlotEvicted && !changed) e.pos = int64_t(1) << 40, changed = true;
  }
  ASSERT_TRUE(changed);
  try {
    Timeline t(run);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot_evicted"), std::string::npos) << e.what();
  }
}

TEST(VizTimeline, SeekingBackwardsMatchesAReplayFromTheStart) {
  const Recording rec = record(small_one_shot(), {});
  Timeline t(rec.runs[1]);
  for (size_t at : {t.size(), t.size() / 2, size_t(1), t.size() - 1, size_t(0), t.size() / 3}) {
    t.seek(at);
    expect_same(t.occupancy(), replay(rec.runs[1]->header, rec.runs[1]->events, at));
  }
}

TEST(VizTimeline, RoundAndMoveStepsLandOnTheirEvents) {
  const Recording rec = record(small_streaming(), {});
  Timeline t(rec.runs[1]);  // compact
  ASSERT_GT(t.rounds(), 3u);
  int rounds = 0;
  while (t.cursor() < t.size()) {
    t.seek(t.next(Unit::Round, t.cursor()));
    if (t.cursor() == t.size() && t.event(t.size() - 1).kind != EventKind::RoundEnd) break;  // tokens after the last round
    ASSERT_EQ(t.event(t.cursor() - 1).kind, EventKind::RoundEnd);
    EXPECT_FALSE(t.in_round());
    EXPECT_EQ(t.counters().rounds, ++rounds);
  }
  EXPECT_EQ(size_t(rounds), t.rounds());
  // Back by rounds: each lands just after the previous round's end (or at 0).
  while (t.cursor() > 0) {
    t.seek(t.prev(Unit::Round, t.cursor()));
    if (t.cursor() > 0) {
      ASSERT_EQ(t.event(t.cursor() - 1).kind, EventKind::RoundEnd);
    }
  }
  // Moves and tokens.
  const size_t m = t.next(Unit::Move, 0);
  ASSERT_LT(m, t.size());
  EXPECT_EQ(t.event(m - 1).kind, EventKind::SlotMoved);
  EXPECT_EQ(t.event(t.next(Unit::Token, 5) - 1).kind, EventKind::SlotWritten);
  // One move forward from just before a batch, and one back, return there (back once
  // went to just after the batch before, or to 0 from the run's first batch).
  for (size_t from = 0, batches = 0; batches < 3; ++batches) {
    const size_t begin = t.next_batch(from).first;
    ASSERT_LT(begin, t.size());
    EXPECT_EQ(t.next(Unit::Move, begin), begin + 1);
    EXPECT_EQ(t.prev(Unit::Move, begin + 1), begin) << "batch " << batches;
    EXPECT_EQ(t.prev(Unit::Move, begin + 2), begin + 1);
    EXPECT_LT(t.prev(Unit::Move, begin), begin);
    from = t.next_batch(from).second;
  }
}

// A compaction batch is a whole run of consecutive moves: from inside one, the next
// batch (and the next stop of playback) is the following run, not the next move.
TEST(VizTimeline, ABatchIsEveryMoveOfARun) {
  const Recording rec = record(small_streaming(), {});
  Timeline t(rec.runs[1]);  // compact
  std::vector<std::pair<size_t, size_t>> runs;  // [begin, end) of each run of SlotMoved, read off the events
  for (size_t i = 0; i < t.size(); ++i)
    if (t.event(i).kind == EventKind::SlotMoved) {
      if (runs.empty() || runs.back().second != i) runs.emplace_back(i, i);
      runs.back().second = i + 1;
    }
  ASSERT_GT(runs.size(), 2u);
  int longer = 0;  // batches of more than one move
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto [begin, end] = runs[r];
    longer += end - begin > 1;
    EXPECT_EQ(t.next_batch(begin), runs[r]) << "batch " << r;
    const std::pair<size_t, size_t> after = r + 1 < runs.size() ? runs[r + 1] : std::pair{t.size(), t.size()};
    EXPECT_EQ(t.next_batch(begin + 1), after) << "from inside batch " << r;
    EXPECT_GE(t.next_stop(begin + 1), end) << "from inside batch " << r;
  }
  EXPECT_GT(longer, 0);
}

// The counters at the end of a recorded run against simulate()'s own result.
void expect_counters_match(const Counters& k, const SimulationResult& r) {
  EXPECT_EQ(k.written, r.tokens);
  EXPECT_EQ(k.live(), r.live);
  EXPECT_EQ(k.blocks_in_use, r.blocks_in_use);
  EXPECT_EQ(k.full_cache_blocks, r.blocks_full_cache);
  EXPECT_EQ(k.peak_blocks, r.peak_blocks);
  EXPECT_EQ(k.rounds, r.rounds);
  EXPECT_EQ(k.moved, r.moves);
  EXPECT_DOUBLE_EQ(k.evicted_fraction(), r.evicted_fraction());
  EXPECT_DOUBLE_EQ(k.blocks_freed_fraction(), r.blocks_freed_fraction());
  EXPECT_EQ(k.bytes_moved(), r.bytes_moved());
  EXPECT_EQ(k.bytes_reclaimed(), r.bytes_reclaimed());
}

TEST(VizTimeline, CountersAtTheEndMatchSimulate) {
  for (const RunSettings& s : {small_one_shot(), small_streaming(), small_streaming("importance", "sinks-recency")}) {
    const Recording rec = record(s, {});
    ASSERT_EQ(rec.runs.size(), 2u);
    for (const auto& run : rec.runs) {
      SimulationConfig c;
      c.tokens = s.tokens;
      c.block_size = s.block_size;
      c.strategy = run->header.strategy;
      c.policy = s.policy;
      c.workload = s.workload;
      c.seed = s.seed;
      c.streaming = s.streaming;
      c.evict_fraction = s.evict_fraction;
      c.schedule = {s.streaming ? s.budget : 0, s.slack, s.sinks, s.recent};
      const SimulationResult r = simulate(c);
      Timeline t(run);
      t.seek(t.size());
      expect_counters_match(t.counters(), r);
    }
  }
}

// kvscope-viz --trace: a trace file written from a simulation shows the run it
// recorded: the same counters at the end, bytes included (bytes_per_token from the
// header), and the header's settings in the summary line.
TEST(VizTrace, ATraceFileShowsTheRunItRecorded) {
  SimulationConfig c;
  c.tokens = 3000;
  c.strategy = MemoryStrategy::Compact;
  c.streaming = true;
  c.schedule = {256, 64, 4, 32};
  c.record_events = true;
  const SimulationResult r = simulate(c);
  const std::string path = testing::TempDir() + "viz_trace_test.trace";
  write_trace(path, {c.block_size, r.blocks_full_cache, c.strategy,
                     {{"source", "simulate"}, {"policy", "random"}, {"bytes_per_token", std::to_string(c.bytes_per_token)}}},
              r.events);

  const auto run = load_trace_run(path);
  EXPECT_EQ(run->label, "compact");
  EXPECT_EQ(run->policy, "random");
  EXPECT_EQ(run->sequences, 1);
  EXPECT_FALSE(run->served());
  EXPECT_FALSE(run->has_scores());  // a trace holds none
  EXPECT_TRUE(run->traced);         // and the app's tooltip says so
  EXPECT_EQ(trace_summary(*run), "kvscope simulate --trace: bytes_per_token=229376, policy=random, " +
                                     commas(int64_t(r.events.size())) + " events");
  Timeline t(run);
  t.seek(t.size());
  expect_counters_match(t.counters(), r);

  // serve-bench's traces are served runs (sequences released as requests finish).
  write_trace(path, {c.block_size, r.blocks_full_cache, c.strategy, {{"source", "serve-bench"}}}, r.events);
  EXPECT_TRUE(load_trace_run(path)->served());
  EXPECT_EQ(load_trace_run(path)->bytes_per_token, 0);  // not in the header: memory shows as 0 B
  // A header value that is not a byte count is refused by name.
  write_trace(path, {c.block_size, r.blocks_full_cache, c.strategy, {{"bytes_per_token", "lots"}}}, r.events);
  try {
    load_trace_run(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": bytes_per_token=lots is not a byte count");
  }
  std::remove(path.c_str());
}

// A trace from kvscope generate lists its token ids ("tokens.0"), and the app reads
// them as text with the model's tokenizer: the sequence strip then shows the words
// generate printed, not positions.
TEST(VizTrace, AGenerateTraceShowsTheTextItPrinted) {
  const std::string path = testing::TempDir() + "viz_generate.trace";
  const std::string model = test::source_path("assets/model");
  const test::ProgramRun r = test::run_shell(test::binary_path("kvscope") + " generate --model " + model +
                                             " --prompt 'The json module' -n 24 --temperature 0 --budget 12 --slack 4"
                                             " --sinks 2 --recent 4 --trace " + path + " 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_FALSE(r.output.empty());
  const std::string printed = r.output.substr(0, r.output.size() - 1);  // the text ends its line

  const auto run = load_trace_run(path);
  ASSERT_EQ(run->token_text.size(), 1u);
  const size_t prompt_tokens = Tokenizer::load(model + "/tokenizer.json").encode("The json module").size();
  EXPECT_EQ(run->token_text[0].size(), prompt_tokens + 24);  // the prompt and the new tokens
  std::string joined;
  for (const std::string& t : run->token_text[0]) joined += t;
  EXPECT_EQ(joined, printable(printed));
  EXPECT_EQ(run->text(0, 0), "The");
  EXPECT_EQ(run->text_note, "token text from " + model + "/tokenizer.json");
  const std::string summary = trace_summary(*run);
  EXPECT_EQ(summary.find("tokens.0"), std::string::npos) << summary;  // the ids are not listed
  EXPECT_NE(summary.find("; token text from "), std::string::npos) << summary;

  // A relative --model is written as the folder it leads to, so the app finds the
  // tokenizer whatever folder it is started from.
  const test::ProgramRun relative = test::run_command("cd '" + test::source_path("") + "' && " +
                                                     test::binary_path("kvscope") +
                                                     " generate --model tests/models/tiny-tied --prompt hi -n 2 --trace " + path);
  ASSERT_EQ(relative.code, 0) << relative.output;
  EXPECT_EQ(read_trace(path).header.meta.at("model"), absolute_path(test::tiny_model("tiny-tied")));
  const Tokenizer tiny = Tokenizer::load(test::tiny_model("tiny-tied") + "/tokenizer.json");
  EXPECT_EQ(load_trace_run(path)->token_text.at(0).size(), tiny.with_special_tokens(tiny.encode("hi")).size() + 2);
  std::remove(path.c_str());
}

// The README's pair: generate under holes and under compact, with the same prompt
// and seed, writes the same text (compaction changes no logit), so the app plays
// the two traces in step (one schedule) and shows one text for both.
TEST(VizTrace, GenerateTracesOfHolesAndCompactPlayInStep) {
  std::vector<std::shared_ptr<const viz::Run>> runs;  // viz::, as Run alone is the test class's own Run()
  for (const char* strategy : {"holes", "compact"}) {
    const std::string path = testing::TempDir() + "viz_generate_" + strategy + ".trace";
    const test::ProgramRun r = test::run_command(test::binary_path("kvscope") + " generate --model " +
                                                 test::source_path("assets/model") +
                                                 " --prompt 'The json module' -n 120 --budget 48 --slack 16 --seed 2"
                                                 " --strategy " + strategy + " --trace " + path);
    ASSERT_EQ(r.code, 0) << r.output;
    runs.push_back(load_trace_run(path));
    std::remove(path.c_str());
  }
  EXPECT_EQ(runs[0]->token_text, runs[1]->token_text);
  const Session session(runs);
  EXPECT_TRUE(session.same_schedule());
  Timeline holes(runs[0]), compact(runs[1]);
  holes.seek(holes.size());
  compact.seek(compact.size());
  EXPECT_EQ(holes.counters().live(), compact.counters().live());
  EXPECT_LT(compact.counters().blocks_in_use, holes.counters().blocks_in_use);  // what compaction gives back
}

// kvscope-viz --trace A,B: two traces of one strategy are named by their files (the
// views and the counters show the names); a holes and a compact trace need none.
TEST(VizTrace, TwoTracesOfOneStrategyAreToldApartByName) {
  SimulationConfig c;
  c.tokens = 200;
  c.record_events = true;
  const SimulationResult r = simulate(c);
  const std::string dir = test::own_temp_dir();
  const auto write = [&](const std::string& name, MemoryStrategy strategy) {
    write_trace(dir + name, {c.block_size, r.blocks_full_cache, strategy, {}}, r.events);
    return dir + name;
  };
  const std::string a = write("a.trace", MemoryStrategy::Compact), b = write("b.trace", MemoryStrategy::Compact),
                    h = write("h.trace", MemoryStrategy::HolesOnly);
  const auto same = load_trace_runs({a, b});
  ASSERT_EQ(same.size(), 2u);
  EXPECT_EQ(same[0]->name, "a.trace");
  EXPECT_EQ(view_label(*same[1]), "b.trace");
  const auto pair = load_trace_runs({h, b});
  // Recorded alike, the two share one summary line, with each one's events (once it
  // gave the left's count alone, beside a transport bar counting the right's).
  c.tokens = 300;
  const SimulationResult longer = simulate(c);
  write_trace(dir + "l.trace", {c.block_size, longer.blocks_full_cache, MemoryStrategy::Compact, {}}, longer.events);
  const auto both = load_trace_runs({h, dir + "l.trace"});
  EXPECT_EQ(trace_summary(*both[0], both[1].get()), "kvscope (unknown source) --trace: " +
                                                        commas(int64_t(r.events.size())) + " events on the left, " +
                                                        commas(int64_t(longer.events.size())) + " on the right");
  EXPECT_NE(r.events.size(), longer.events.size());
  std::remove((dir + "l.trace").c_str());
  EXPECT_EQ(pair[0]->name, "");
  EXPECT_EQ(view_label(*pair[0]), "holes");
  EXPECT_EQ(view_label(*pair[1]), "compact");
  EXPECT_EQ(load_trace_runs({a})[0]->name, "");
  // A run without eviction is "none", whatever strategy its cache was built with (generate
  // writes compact, serve-bench holes); two of them are told apart by name too.
  const auto none = [&](const std::string& name, MemoryStrategy strategy) {
    write_trace(dir + name, {c.block_size, r.blocks_full_cache, strategy, {{"policy", "none"}}}, r.events);
    return dir + name;
  };
  const std::string n1 = none("n1.trace", MemoryStrategy::Compact), n2 = none("n2.trace", MemoryStrategy::HolesOnly);
  EXPECT_EQ(load_trace_runs({n1})[0]->label, "none");
  const auto nones = load_trace_runs({n1, n2});
  EXPECT_EQ(view_label(*nones[0]), "n1.trace");
  EXPECT_EQ(view_label(*nones[1]), "n2.trace");
  EXPECT_EQ(view_label(*load_trace_runs({n2, b})[0]), "none");
  for (const std::string& path : {n1, n2}) std::remove(path.c_str());
  EXPECT_THROW(load_trace_runs({a, b, h}), Error);
  EXPECT_THROW(load_trace_runs({}), Error);
  for (const std::string& path : {a, b, h}) std::remove(path.c_str());
}

// serve-bench's trace lists every sequence's tokens too: each request's prompt is a
// piece of the held-out text it was cut from, and a preempted request's new
// sequence holds the same tokens as its first. With --config (random weights and
// random ids) there is no text to list.
TEST(VizTrace, AServeBenchTraceShowsEachRequestsText) {
  const std::string path = testing::TempDir() + "viz_serve.trace";
  const std::string model = test::source_path("assets/model");
  const std::string serve = test::binary_path("kvscope") + " serve-bench --model " + model +
                            " --requests 4 --prompt-len 32 --output-len 48 --blocks 6 --budget 16 --slack 8"
                            " --sinks 2 --recent 4 --repeat 1 --strategies holes --trace " + path;
  const test::ProgramRun r = test::run_command(serve);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto run = load_trace_run(path);
  ASSERT_GT(run->sequences, 4) << "the pool is meant to preempt a request: " << r.output;
  ASSERT_EQ(int(run->token_text.size()), run->sequences);

  const std::string heldout = printable(read_text_file(model + "/heldout.txt"));
  const Tokenizer tokenizer = Tokenizer::load(model + "/tokenizer.json");
  std::set<std::string> requests;  // each request's whole text, once however many sequences it ran in
  for (int seq = 0; seq < run->sequences; ++seq) {
    const std::vector<std::string>& text = run->token_text[size_t(seq)];
    ASSERT_EQ(text.size(), 32u + 48u) << "sequence " << seq;
    std::string prompt, all;
    for (size_t i = 0; i < text.size(); ++i) (i < 32 ? prompt : all) += text[i];
    EXPECT_NE(heldout.find(prompt), std::string::npos) << "sequence " << seq << ": " << prompt;
    requests.insert(prompt + all);
  }
  EXPECT_EQ(requests.size(), 4u);  // 4 requests' texts, in more than 4 sequences
  // Each preemption gave a request one more sequence; the header counts them (the app shows it).
  EXPECT_EQ(run->header.meta.at("preemptions"), std::to_string(run->sequences - 4));

  const test::ProgramRun random = test::run_command(
      test::binary_path("kvscope") + " serve-bench --config " + test::tiny_model("tiny-tied") + "/config.json" +
      " --requests 2 --prompt-len 8 --output-len 8 --blocks 4 --repeat 1 --strategies none --trace " + path);
  ASSERT_EQ(random.code, 0) << random.output;
  EXPECT_TRUE(load_trace_run(path)->token_text.empty());
  const TraceHeader header = read_trace(path).header;
  EXPECT_EQ(trace_token_ids(header, path).size(), 0u);
  EXPECT_EQ(header.meta.count("model"), 0u);  // the header names the config the random model was built from
  EXPECT_EQ(header.meta.at("config"), test::tiny_model("tiny-tied") + "/config.json");
  std::remove(path.c_str());
}

// Token ids without their tokenizer leave the run without text, and say why; an id
// the tokenizer does not have is an error naming the file.
TEST(VizTrace, TokenIdsWithoutTheirTokenizerShowPositions) {
  SimulationConfig c;
  c.tokens = 64;
  c.record_events = true;
  const SimulationResult r = simulate(c);
  const std::string path = testing::TempDir() + "viz_token_ids.trace";
  const auto write = [&](const std::string& model, const std::string& ids) {
    write_trace(path, {c.block_size, r.blocks_full_cache, c.strategy, {{"model", model}, {"tokens.0", ids}}}, r.events);
  };
  write("/nowhere", "1,2,3");
  const auto run = load_trace_run(path);
  EXPECT_TRUE(run->token_text.empty());
  EXPECT_EQ(run->text_note, "token ids, but no /nowhere/tokenizer.json to read them: positions shown");
  write_trace(path, {c.block_size, r.blocks_full_cache, c.strategy, {{"tokens.0", "1,2"}}}, r.events);
  EXPECT_EQ(load_trace_run(path)->text_note, "token ids, but no model named to read them with: positions shown");

  const std::string model = test::source_path("assets/model");
  write(model, "1,99999999");
  try {
    load_trace_run(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": token id 99999999 of sequence 0 is not in " + model +
                                              "/tokenizer.json (", 0), 0u) << e.what();
  }
  write(model, "1,x");
  EXPECT_THROW(load_trace_run(path), Error);  // trace_token_ids' message (cache_test checks it)
  std::remove(path.c_str());
}

// The served runs' summary (every request is released at their end, so the
// blocks freed at that moment is "-"): blocks freed after each token written, averaged.
TEST(VizTimeline, FreedOnAverageWeighsEveryTokenWritten) {
  EventLog log;
  PagedKvCache cache(8, 4, MemoryStrategy::HolesOnly, &log);
  const int seq = cache.add_sequence();
  for (int i = 0; i < 8; ++i) cache.append(seq);  // 2 blocks, both full: nothing freed, 8 times
  cache.begin_round(seq);
  cache.evict(seq, {0, 1, 2, 3});  // block 0 empties and goes back
  cache.end_round(seq);
  for (int i = 0; i < 4; ++i) cache.append(seq);  // 2 blocks held of ceil(12/4) = 3: 1/3 freed, 4 times
  cache.release_sequence(seq);

  Occupancy occ(cache.num_blocks(), cache.block_size());
  Counters c(cache.block_size(), 1);
  EXPECT_TRUE(std::isnan(c.blocks_freed_fraction()));  // nothing written yet: not "0.0% of 0"
  EXPECT_TRUE(std::isnan(c.evicted_fraction()));       // and no share evicted of nothing
  EXPECT_EQ(percent(c.evicted_fraction()), "-");
  for (const Event& e : log) {
    occ.apply(e);
    c.count(e, occ);
  }
  EXPECT_EQ(c.written, 12);
  EXPECT_TRUE(std::isnan(c.blocks_freed_fraction()));      // all released: nothing to compare
  EXPECT_NEAR(c.mean_freed_fraction(), (4.0 / 3.0) / 12.0, 1e-12);  // (8 x 0 + 4 x 1/3) / 12
}

TEST(VizTimeline, TheBlogScenarioMakesThePoint) {
  const Recording rec = record(find_scenario("blog-16k-random")->settings, {});
  Timeline holes(rec.runs[0]), compact(rec.runs[1]);
  holes.seek(holes.size());
  compact.seek(compact.size());
  EXPECT_NEAR(holes.counters().evicted_fraction(), 0.875, 1e-9);
  EXPECT_NEAR(holes.counters().blocks_freed_fraction(), 0.118, 0.03);  // 0.875^16
  EXPECT_NEAR(compact.counters().blocks_freed_fraction(), 0.875, 0.001);
}

// The (evicted)^B law is shown for the runs it describes: one round of random
// eviction with nothing protected. With sinks and recent the others go more often
// and the run frees more; the app once showed 1.0% beside a run that freed 9.4%.
TEST(VizTimeline, TheLawIsShownOnlyWhereNothingIsProtected) {
  RunSettings s = small_one_shot();
  EXPECT_TRUE(record(s, {}).runs[0]->random_one_shot());
  s.sinks = 64;
  EXPECT_FALSE(record(s, {}).runs[0]->random_one_shot());
  s.sinks = 0, s.recent = 64;
  EXPECT_FALSE(record(s, {}).runs[0]->random_one_shot());
  s.recent = 0, s.policy = "importance";
  EXPECT_FALSE(record(s, {}).runs[0]->random_one_shot());
  EXPECT_FALSE(record(small_streaming(), {}).runs[0]->random_one_shot());
  // A trace of kvscope simulate says the same: its header records sinks and recent.
  const std::string sinks_trace = testing::TempDir() + "law_sinks.trace";
  const std::string pure_trace = testing::TempDir() + "law_pure.trace";
  const test::ProgramRun protected_run = test::run_kvscope(
      "simulate --tokens 1024 --evict 0.75 --sinks 64 --recent 64 --strategy holes --trace " + sinks_trace);
  ASSERT_EQ(protected_run.code, 0) << protected_run.output;
  EXPECT_FALSE(load_trace_run(sinks_trace)->random_one_shot());
  const test::ProgramRun pure_run =
      test::run_kvscope("simulate --tokens 1024 --evict 0.75 --strategy holes --trace " + pure_trace);
  ASSERT_EQ(pure_run.code, 0) << pure_run.output;
  EXPECT_TRUE(load_trace_run(pure_trace)->random_one_shot());
}

// The counters' law row and the chart's law line ask one question: is there a
// holes-only view of such a run, the view whose blocks freed the law predicts.
TEST(VizSession, TheLawIsShownBesideAHolesOnlyView) {
  RunSettings s = small_one_shot();
  EXPECT_TRUE(Session(record(s, {}).runs).shows_law());  // holes only, compaction
  s.strategies = {MemoryStrategy::ReuseHoles, MemoryStrategy::Compact};
  EXPECT_FALSE(Session(record(s, {}).runs).shows_law());
  s.strategies = {MemoryStrategy::Compact, MemoryStrategy::HolesOnly};
  EXPECT_TRUE(Session(record(s, {}).runs).shows_law());
  s.sinks = 64;
  EXPECT_FALSE(Session(record(s, {}).runs).shows_law());
  // Two unrelated runs: a pure one-shot compacted, beside a holes-only run with sinks.
  RunSettings pure = small_one_shot();
  pure.strategies = {MemoryStrategy::Compact};
  RunSettings with_sinks = small_one_shot();
  with_sinks.strategies = {MemoryStrategy::HolesOnly};
  with_sinks.sinks = 64;
  EXPECT_FALSE(Session({record(pure, {}).runs.at(0), record(with_sinks, {}).runs.at(0)}).shows_law());
}

// A tooltip's score says what it measures: the policy's own quantity, or the
// synthetic workload's importance.
TEST(VizRun, AScoreSaysWhatItMeasures) {
  viz::Run r;
  const std::map<std::string, std::string> says = {{"h2o", "H2O: attention received so far"},
                                                   {"snapkv", "SnapKV: the observation window's pooled votes"},
                                                   {"triattention", "TriAttention: the key's predicted attention"}};
  for (const auto& [policy, meaning] : says) {
    r.policy = policy;
    EXPECT_EQ(r.score_meaning(), meaning + ", as of the last round");
  }
  r.importance = [](int, int64_t, int64_t) { return 1.0; };
  EXPECT_EQ(r.score_meaning(), "the workload's importance of the token now");
}

// A scenario's summary line is written by hand: every number in it must be one of
// its settings (tokens, the share evicted, budget, slack, their sum, block size,
// requests, the requests the pool holds), or the law's figure at its settings,
// rounded ("~12%"). Numbers are read as the doc test reads prose: digits glued to
// letters ("H2O", "4th") are not numbers here.
TEST(VizScenarios, EveryNumberInASummaryLineIsItsSettings) {
  int seen = 0;
  for (const Scenario& sc : scenarios()) {
    const RunSettings& r = sc.settings;
    std::set<std::string> allowed = {commas(r.tokens), std::to_string(r.budget), std::to_string(r.slack),
                                      std::to_string(r.budget + r.slack), std::to_string(r.block_size),
                                      std::to_string(r.sequences), std::to_string(r.sequences - 1),
                                      fmt("%g", r.evict_fraction), fmt("%.1f", 100 * r.evict_fraction),
                                      fmt("%.0f", 100 * expected_blocks_freed(r.evict_fraction, r.block_size))};
    for (const docs::Number& n : docs::numbers(sc.summary)) {
      if (n.glued) continue;
      ++seen;
      EXPECT_TRUE(allowed.count(n.text)) << sc.name << ": " << n.text << " in \"" << sc.summary << "\"";
    }
  }
  EXPECT_GE(seen, 20);  // the summaries' numbers are found (21 today)
}

// The README's two screenshots are captioned with numbers: the scenario, recorded
// again here, must end with them (its pictures are made by the same recording).
TEST(VizScenarios, TheReadmeCaptionsTheScreenshotsWithTheirScenariosNumbers) {
  std::string readme = read_file(std::string(KVSCOPE_SOURCE_DIR) + "/README.md");
  std::replace(readme.begin(), readme.end(), '\n', ' ');  // captions wrap anywhere
  const auto quoted = [&](const std::string& s) { EXPECT_NE(readme.find(s), std::string::npos) << "README: " << s; };
  const auto ends = [](const Recording& rec, size_t run) {
    Timeline t(rec.runs.at(run));
    t.seek(t.size());
    return t.counters();
  };

  const RunSettings& blog = find_scenario("blog-16k-random")->settings;
  const Recording random = record(blog, {});
  const Counters holes = ends(random, 0), compact = ends(random, 1);
  quoted("![blog-16k-random: evicted " + percent(holes.evicted_fraction()) + ", freed " +
         percent(holes.blocks_freed_fraction()) + " with holes only vs " + percent(compact.blocks_freed_fraction()) +
         " with compaction]");
  quoted("`kvscope-viz --scenario blog-16k-random`: " + commas(blog.tokens) + " tokens, " +
         percent(holes.evicted_fraction()) + " evicted at random. Left, holes only: " + commas(holes.blocks_in_use) +
         " of " + commas(holes.full_cache_blocks) + " blocks still held (" + percent(holes.blocks_freed_fraction(), 0) +
         " freed, the (" + fmt("%g", blog.evict_fraction) + ")^" + std::to_string(blog.block_size) +
         " law). Right, compaction: " + commas(compact.blocks_in_use) + " blocks held (" +
         percent(compact.blocks_freed_fraction()) + " freed).");

  const RunSettings& h2o = find_scenario("h2o-model")->settings;
  const Recording model = record(h2o, {bundled_model_dir(), ""});
  ASSERT_EQ(model.settings.source, Source::Model) << model.note;
  const Counters model_holes = ends(model, 0), model_compact = ends(model, 1);
  quoted("![h2o-model: the bundled model reads its prompt and generates " + std::to_string(h2o.tokens) + " tokens; H2O keeps " +
         std::to_string(h2o.budget) + "; holes only frees " + percent(model_holes.blocks_freed_fraction()) +
         " of the blocks, compaction " + percent(model_compact.blocks_freed_fraction()) + "]");
  quoted("model reads its prompt and generates " + std::to_string(h2o.tokens) + " tokens while H2O keeps " + std::to_string(h2o.budget) +
         " (+" + std::to_string(h2o.slack) + " slack). Left, holes only: " + std::to_string(model_holes.blocks_in_use) +
         " of " + std::to_string(model_holes.full_cache_blocks) + " blocks still held. Right, compaction: " +
         std::to_string(model_compact.blocks_in_use) + ".*");
}

TEST(VizTimeline, ImportanceShadingUsesTheWorkloadSimulateRanksBy) {
  // One-shot by importance keeps the top scores: every kept token must score at
  // least as high as every evicted one under the app's copy of the workload.
  RunSettings s = small_one_shot();
  s.policy = "importance";
  s.workload = "heavy-tailed";
  const Recording rec = record(s, {});
  Timeline t(rec.runs[0]);
  t.seek(t.size());
  ScoresAt scores(t.run(), t.cursor(), t.counters().next_pos);
  double min_kept = 1e300, max_evicted = -1e300;
  int kept = 0, evicted = 0;
  for (int64_t p = 0; p < s.tokens; ++p) {
    const double v = *scores(0, p);
    if (t.locate(0, p).block >= 0) {
      min_kept = std::min(min_kept, v);
      ++kept;
    } else {
      max_evicted = std::max(max_evicted, v);
      ++evicted;
    }
  }
  ASSERT_GT(kept, 0);
  ASSERT_GT(evicted, 0);
  EXPECT_GE(min_kept, max_evicted);
}

TEST(VizSession, TwoStrategiesStayInStep) {
  const Recording rec = record(small_streaming(), {});
  Session session(rec.runs);
  ASSERT_EQ(session.views(), 2);
  EXPECT_EQ(session.primary(), 1);  // compaction drives the clock
  const Timeline& holes = session.view(0);
  const Timeline& compact = session.view(1);
  // Round by round, both have seen the same tokens and keep the same ones.
  while (session.cursor() < session.length()) {
    session.step(Unit::Round, +1);
    EXPECT_EQ(holes.counters().written, compact.counters().written);
    EXPECT_EQ(holes.counters().live(), compact.counters().live());
    EXPECT_EQ(holes.counters().rounds, compact.counters().rounds);
    for (int64_t p = 0; p < compact.counters().next_position(0); p += 7)
      ASSERT_EQ(holes.locate(0, p).block >= 0, compact.locate(0, p).block >= 0) << "position " << p;
  }
  EXPECT_EQ(holes.cursor(), holes.size());
  // Compaction never holds more blocks than holes.
  EXPECT_LE(compact.counters().blocks_in_use, holes.counters().blocks_in_use);
}

TEST(VizSession, OneScheduleIsToldByItsEventsNotByTheirCount) {
  // Two random-policy runs with different seeds write and evict as many tokens, round
  // for round, but not the same ones: shown side by side (kvscope-viz --trace A,B)
  // they are not one schedule, and the other view follows by tokens written.
  RunSettings other = small_streaming();
  other.seed = 2;
  const Recording a = record(small_streaming(), {}), b = record(other, {});
  Session one(a.runs);
  Session two({a.runs[0], b.runs[1]});
  ASSERT_EQ(two.view(0).logical_size(), two.view(1).logical_size()) << "this test needs runs of equal counts";
  EXPECT_TRUE(one.same_schedule());
  EXPECT_FALSE(two.same_schedule());
}

// Hole reuse puts new tokens in old slots, so a round evicts its tokens in another
// order than compaction's run does, though the same tokens. They are one schedule:
// the other view follows event for event, and mid-round both have evicted as many
// (once it was put a round ahead, by its share of tokens written).
TEST(VizSession, HoleReuseAndCompactionAreOneSchedule) {
  RunSettings s = small_streaming();
  s.strategies = {MemoryStrategy::ReuseHoles, MemoryStrategy::Compact};
  const Recording rec = record(s, {});
  Session session(rec.runs);
  ASSERT_EQ(session.primary(), 1);
  const Timeline& reuse = session.view(0);
  const Timeline& compact = session.view(1);
  EXPECT_TRUE(session.same_schedule());
  bool orders_differ = false;  // the case this test is for
  while (session.cursor() < session.length()) {
    session.step(Unit::Event, +1);
    ASSERT_EQ(reuse.counters().written, compact.counters().written) << "event " << session.cursor();
    ASSERT_EQ(reuse.counters().evicted, compact.counters().evicted) << "event " << session.cursor();
    ASSERT_EQ(reuse.round_number(), compact.round_number()) << "event " << session.cursor();
    const Event& e = compact.event(compact.cursor() - 1);
    if (e.kind == EventKind::SlotEvicted && reuse.cursor() > 0) {
      const Event& r = reuse.event(reuse.cursor() - 1);
      orders_differ = orders_differ || (r.kind == EventKind::SlotEvicted && r.pos != e.pos);
    }
  }
  EXPECT_TRUE(orders_differ) << "the two runs evicted in the same order; this test shows nothing";
}

// The phase a view names: evicting while the round's evictions last, evicted once
// they are done (the holes view waits there while the other compacts), compacting.
TEST(VizTimeline, ThePhaseSaysWhenARoundsEvictionsAreDone) {
  const Recording rec = record(small_streaming(), {});
  for (int view : {0, 1}) {
    Timeline t(rec.runs[size_t(view)]);
    const size_t begin = t.next(Unit::Round, 0), end = t.next(Unit::Round, begin);  // round 2, whole
    size_t round_begin = begin;
    while (t.event(round_begin).kind != EventKind::RoundBegin) ++round_begin;
    size_t last_eviction = round_begin;
    for (size_t i = round_begin; i < end; ++i)
      if (t.event(i).kind == EventKind::SlotEvicted) last_eviction = i;
    ASSERT_GT(last_eviction, round_begin + 1) << "view " << view;
    t.seek(round_begin + 2);  // RoundBegin and one eviction applied
    EXPECT_EQ(t.phase(), "round 2: evicting") << "view " << view;
    t.seek(last_eviction + 1);
    EXPECT_EQ(t.phase(), "round 2: evicted") << "view " << view;
    t.seek(end - 1);  // all but the RoundEnd
    EXPECT_EQ(t.phase(), view == 1 ? "round 2: compacting" : "round 2: evicted") << "view " << view;
    t.seek(end);
    EXPECT_EQ(t.phase(), "round 2 done") << "view " << view;
  }
}

// The app keys what it keeps across frames (the chart keys' corners) on Session::id():
// a new session of the same runs, even one built at the old one's address, is new.
TEST(VizSession, EverySessionHasItsOwnId) {
  const Recording rec = record(small_streaming(), {});
  auto first = std::make_unique<Session>(rec.runs);
  const uint64_t id = first->id();
  EXPECT_NE(id, 0u);
  first.reset();
  const auto second = std::make_unique<Session>(rec.runs);
  EXPECT_NE(second->id(), 0u);
  EXPECT_NE(second->id(), id);
}

TEST(VizSession, PlaybackSlidesEachCompactionBatchAndReachesTheEnd) {
  const Recording rec = record(small_streaming(), {});
  Session session(rec.runs);
  session.speed = 5000;
  session.toggle_play();
  int slides = 0, frames = 0;
  bool was_sliding = false;
  while ((session.playing || session.slide()) && frames < 100000) {
    session.update(1.0 / 60);
    ++frames;
    if (const Session::Slide* s = session.slide()) {
      if (!was_sliding) {
        ++slides;
        // The clock waits before the batch: its first event is a move not yet applied.
        EXPECT_EQ(session.cursor(), s->begin);
        EXPECT_EQ(session.primary_view().event(s->begin).kind, EventKind::SlotMoved);
        // The other view has done the round's evictions already.
        EXPECT_TRUE(session.view(0).in_round());
      }
      was_sliding = true;
    } else {
      was_sliding = false;
    }
  }
  EXPECT_EQ(session.cursor(), session.length());
  EXPECT_GT(slides, 0);
  EXPECT_LE(size_t(slides), session.primary_view().rounds());
  // Chart series: from nothing to the end state.
  ASSERT_FALSE(session.history().empty());
  EXPECT_EQ(session.history().front().x, 0u);
  EXPECT_EQ(session.history().back().x, session.length());
  EXPECT_FLOAT_EQ(session.history().back().run[1].freed, float(session.view(1).counters().blocks_freed_fraction()));
}

// Played to its end, the last slide's survivors stop flashing within 0.3 s (they
// once stayed "moving" for good); a jump flashes nothing; a step flashes what it did.
TEST(VizSession, AFlashFadesWhenPlayEndsAndOnlyAStepLeavesOne) {
  const Recording rec = record(small_one_shot(), {});
  Session session(rec.runs);
  session.speed = 5000;
  session.toggle_play();
  for (int frames = 0; (session.playing || session.slide()) && frames < 100000; ++frames) session.update(1.0 / 60);
  ASSERT_EQ(session.cursor(), session.length());
  for (int k = 0; k < 30; ++k) session.update(1.0 / 60);  // half a second
  for (int v = 0; v < session.views(); ++v) EXPECT_EQ(session.flash_from(v), session.view(v).cursor()) << "view " << v;
  session.seek(0);
  session.seek(session.length() / 2);  // forward: a jump once flashed every event it applied
  for (int v = 0; v < session.views(); ++v) EXPECT_EQ(session.flash_from(v), session.view(v).cursor()) << "view " << v;
  const size_t c = session.cursor();
  session.step(Unit::Event, +1);
  EXPECT_EQ(session.flash_from(session.primary()), c);
  for (int k = 0; k < 60; ++k) session.update(1.0 / 60);
  EXPECT_EQ(session.flash_from(session.primary()), c) << "a step's flash stays while the clock is stopped";
  // A pause fades what played last, as the end does (it once held it for good).
  session.seek(0);
  session.toggle_play();
  for (int k = 0; k < 30; ++k) session.update(1.0 / 60);
  ASSERT_TRUE(session.playing);
  ASSERT_LT(session.flash_from(session.primary()), session.cursor()) << "nothing flashed while playing";
  session.toggle_play();
  for (int k = 0; k < 30; ++k) session.update(1.0 / 60);
  for (int v = 0; v < session.views(); ++v) EXPECT_EQ(session.flash_from(v), session.view(v).cursor()) << "view " << v;
}

// A step back during a slide returns to before it (it once completed the slide: a
// step back that moved the clock forward). Pausing holds playback's slide, and a
// second play pauses before the batch again (it once went straight into the slide).
TEST(VizSession, AStepBackDuringASlideReturnsAndAPauseHoldsIt) {
  const Recording rec = record(small_one_shot(), {});
  Session session(rec.runs);
  session.show_slide(0, 0.5);
  ASSERT_NE(session.slide(), nullptr);
  const size_t begin = session.slide()->begin;
  session.step(Unit::Event, -1);
  EXPECT_EQ(session.slide(), nullptr);
  EXPECT_EQ(session.cursor(), begin);

  session.speed = 5000;
  for (int play = 0; play < 2; ++play) {
    session.seek(0);
    session.toggle_play();
    bool paused_before_the_batch = false;
    int frames = 0;
    while (!session.slide() && frames++ < 100000) {
      session.update(1.0 / 60);
      if (!session.slide() && session.cursor() == begin) paused_before_the_batch = true;
    }
    EXPECT_TRUE(paused_before_the_batch) << "play " << play;
    ASSERT_NE(session.slide(), nullptr);
    session.update(0.05);
    session.toggle_play();  // pause mid-slide
    const double t = session.slide()->t;
    session.update(0.5);
    ASSERT_NE(session.slide(), nullptr);
    EXPECT_EQ(session.slide()->t, t) << "play " << play;
    session.toggle_play();
    for (int k = 0; k < 120 && session.slide(); ++k) session.update(1.0 / 60);
    EXPECT_EQ(session.slide(), nullptr);
    session.playing = false;
  }
}

TEST(VizScenarios, SharedPoolRunsReplayCleanly) {
  const Scenario* s = find_scenario("three-sequences");
  ASSERT_NE(s, nullptr);
  RunSettings settings = s->settings;
  settings.tokens = 800;
  settings.budget = 96;
  settings.slack = 32;
  const Recording rec = record(settings, {});
  ASSERT_EQ(rec.runs.size(), 2u);
  for (const auto& run : rec.runs) {
    Occupancy occ = replay(run->header, run->events);  // throws on any inconsistency
    occ.check_finished();
    EXPECT_EQ(occ.num_sequences(), 3);
    Timeline t(run);
    t.seek(t.size());
    EXPECT_GT(t.counters().rounds, 3);
  }
  // One-shot, hole reuse next to compaction: one round per sequence at the end.
  settings.streaming = false;
  settings.policy = "random";
  settings.strategies = {MemoryStrategy::ReuseHoles, MemoryStrategy::Compact};
  const Recording one_shot = record(settings, {});
  Session session(one_shot.runs);
  session.seek(session.length());
  for (int v = 0; v < 2; ++v) {
    EXPECT_EQ(session.view(v).counters().rounds, 3);
    EXPECT_NEAR(session.view(v).counters().evicted_fraction(), 0.875, 0.01);
  }
  EXPECT_EQ(session.view(0).cursor(), session.view(0).size());
}

TEST(VizScenarios, EveryScenarioHasAUniqueNameAndRecordsWithoutAModel) {
  std::vector<std::string> names;
  for (const Scenario& s : scenarios()) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  for (const char* name : {"blog-16k-random", "streaming-budget", "compaction-on-off", "h2o-model", "triattention-model"})
    EXPECT_NE(find_scenario(name), nullptr) << name;
  // A model scenario with no model falls back to the synthetic stand-in and says so.
  const Recording rec = record(find_scenario("h2o-model")->settings, {});
  EXPECT_EQ(rec.settings.source, Source::Synthetic);
  EXPECT_NE(rec.note.find("no model"), std::string::npos);
}

TEST(VizScenarios, ModelRunsRecordScoresAndText) {
  const ModelSource tiny{std::string(KVSCOPE_SOURCE_DIR) + "/tests/models/tiny-tied", ""};
  RunSettings s = find_scenario("h2o-model")->settings;
  s.tokens = 96;
  const Recording rec = record(s, tiny);
  ASSERT_EQ(rec.runs.size(), 2u);
  EXPECT_EQ(rec.settings.source, Source::Model);
  for (const auto& run : rec.runs) {
    Timeline t(run);  // replays (and checks) the engine's events
    t.seek(t.size());
    ASSERT_FALSE(run->round_scores.empty());
    EXPECT_EQ(size_t(t.counters().rounds), run->round_scores.size());
    for (const RoundScores& r : run->round_scores) EXPECT_EQ(run->events[r.event].kind, EventKind::RoundBegin);
    ASSERT_EQ(run->token_text.size(), 1u);
    EXPECT_GE(int64_t(run->token_text[0].size()), t.counters().written);
    EXPECT_GT(run->bytes_per_token, 0);
  }
  // Hole reuse and compaction leave the same tokens (the same text, the same choices).
  EXPECT_EQ(rec.runs[0]->token_text, rec.runs[1]->token_text);
  // TriAttention without a calibration file says how to make one.
  s.policy = "triattention";
  try {
    record(s, tiny);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kvscope calibrate"), std::string::npos) << e.what();
  }
}

// The token text the app shows: UTF-8 of 1 to 4 bytes as it is, control bytes and
// bytes that are not UTF-8 escaped (\n, \t, \r by name, others as \xHH). The tests
// above compare printable() with itself, so a wrong escape, or a 3-byte character
// shown as bytes, went unnoticed.
TEST(VizTrace, PrintableKeepsUtf8AndEscapesTheRest) {
  const std::string utf8 = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a, e acute, euro sign, an emoji: 1 to 4 bytes
  EXPECT_EQ(printable(utf8), utf8);
  EXPECT_EQ(printable("1\n2\t3\r4"), "1\\n2\\t3\\r4");
  EXPECT_EQ(printable(std::string("\x01\x7F\x00", 3)), "\\x01\\x7F\\x00");
  EXPECT_EQ(printable("\xFF"), "\\xFF");                  // never a UTF-8 byte
  EXPECT_EQ(printable("\xE2\x82"), "\\xE2\\x82");         // a 3-byte character cut short
  EXPECT_EQ(printable("\xC3\x41"), "\\xC3A");             // a lead byte without its continuation
}

// The law the app draws for a one-shot random run: (evicted fraction)^(block size),
// 0.875^16 = 11.8% for the blog's run; nothing checked the block size it is raised to.
TEST(VizTimeline, TheLawIsTheEvictedFractionToTheBlockSize) {
  const Recording rec = record(small_one_shot(), {});
  Timeline t(rec.runs[0]);
  t.seek(t.size());
  const Counters& c = t.counters();
  EXPECT_DOUBLE_EQ(c.evicted_fraction(), 0.875);
  EXPECT_NEAR(c.expected_freed_fraction(), std::pow(0.875, 16), 1e-12);
}

// What load_trace_run says of the trace of a small simulated run whose header holds
// `meta`, less the path it starts with; "" when the trace loads.
std::string trace_refusal(const std::map<std::string, std::string>& meta) {
  SimulationConfig c;
  c.tokens = 64;
  c.record_events = true;
  const SimulationResult r = simulate(c);
  const std::string path = testing::TempDir() + "viz_refused.trace";
  write_trace(path, {c.block_size, r.blocks_full_cache, c.strategy, meta}, r.events);
  std::string what;
  try {
    load_trace_run(path);
  } catch (const Error& e) {
    what = e.what();
  }
  std::remove(path.c_str());
  return what.rfind(path + ": ", 0) == 0 ? what.substr(path.size() + 2) : what;
}

// A trace's bytes_per_token must be a byte count: a negative one is refused, as text is,
// and one whose pool of bytes would overflow the counters (INT64_MAX did, under UBSan).
TEST(VizTrace, ANegativeOrHugeBytesPerTokenIsRefused) {
  EXPECT_EQ(trace_refusal({{"bytes_per_token", "-1"}}), "bytes_per_token=-1 is not a byte count");
  EXPECT_EQ(trace_refusal({{"bytes_per_token", "9223372036854775807"}}),
            "bytes_per_token=9223372036854775807 is more than 68719476736");
  EXPECT_EQ(trace_refusal({{"bytes_per_token", "68719476736"}}), "");
}

// The first id past the tokenizer's last is not in it (the check is >=, not >).
TEST(VizTrace, TheIdOnePastTheVocabularyIsRefused) {
  const std::string model = test::source_path("assets/model");
  const int vocab = Tokenizer::load(model + "/tokenizer.json").vocab_size();
  const std::string why = trace_refusal({{"model", model}, {"tokens.0", "1," + std::to_string(vocab)}});
  const std::string want = "token id " + std::to_string(vocab) + " of sequence 0 is not in ";
  EXPECT_EQ(why.substr(0, want.size()), want) << why;
  EXPECT_EQ(trace_refusal({{"model", model}, {"tokens.0", "1," + std::to_string(vocab - 1)}}), "");
}

// A token a round evicted stays the policy's eviction once its sequence is released
// (the strip drew every gone token of a finished request as "released", while its
// caption counted the round's ones as evicted); one the release took is not.
TEST(VizTimeline, ATokenARoundEvictedStaysEvictedAfterItsSequenceIsReleased) {
  auto run = std::make_shared<viz::Run>();
  PagedKvCache cache(2, 4, MemoryStrategy::HolesOnly, &run->events);
  const int seq = cache.add_sequence();
  for (int i = 0; i < 4; ++i) cache.append(seq);
  cache.begin_round(seq);
  const size_t evicting = run->events.size();  // the round's SlotEvicted
  cache.evict(seq, {1});
  cache.end_round(seq);
  cache.release_sequence(seq);
  ASSERT_EQ(run->events[evicting].kind, EventKind::SlotEvicted);
  run->header = {4, 2, MemoryStrategy::HolesOnly, {}};
  run->bytes_per_token = 1;
  Timeline t(run);
  t.seek(evicting);  // not yet applied
  EXPECT_FALSE(t.evicted_by_policy(seq, 1));
  t.seek(evicting + 1);
  EXPECT_TRUE(t.evicted_by_policy(seq, 1));
  t.seek(t.size());
  EXPECT_TRUE(t.evicted_by_policy(seq, 1));
  for (int64_t pos : {0, 2, 3}) EXPECT_FALSE(t.evicted_by_policy(seq, pos)) << pos;  // the release's
}

// What the strip and the pool draw, and --verify expects, is classified once, here:
// every token state and every slot state of one small run.
TEST(VizTimeline, EveryTokenAndSlotStateIsTold) {
  auto run = std::make_shared<viz::Run>();
  PagedKvCache cache(/*num_blocks=*/4, /*block_size=*/2, MemoryStrategy::HolesOnly, &run->events);
  const int a = cache.add_sequence(), b = cache.add_sequence(), c = cache.add_sequence();
  for (int i = 0; i < 3; ++i) cache.append(a);  // positions 0, 1 | 2 and room
  cache.append(b);
  for (int i = 0; i < 2; ++i) cache.append(c);  // the pool's last block, full
  const int c_block = cache.sequence(c).blocks.at(0);
  cache.begin_round(a);
  cache.evict(a, {1});
  cache.end_round(a);
  cache.evict(c, {0, 1});  // outside a round: in the events, what a release looks like
  cache.release_sequence(b);
  const int d = cache.add_sequence();
  cache.append(d);  // a block c wrote in: one slot written, one room again
  const std::vector<int> a_blocks = cache.sequence(a).blocks, d_blocks = cache.sequence(d).blocks;
  ASSERT_EQ(a_blocks.size(), 2u);
  ASSERT_EQ(d_blocks.size(), 1u);
  ASSERT_EQ(d_blocks[0], c_block);  // the pool hands out the block freed first
  run->header = {/*block_size=*/2, /*num_blocks=*/4, MemoryStrategy::HolesOnly, {}};
  run->bytes_per_token = 1;
  Timeline t(run);
  t.seek(t.size());

  EXPECT_EQ(t.token_state(a, 0), TokenState::Live);
  EXPECT_EQ(t.token_state(a, 1), TokenState::Evicted);
  EXPECT_EQ(t.token_state(a, 3), TokenState::Future);
  EXPECT_EQ(t.token_state(b, 0), TokenState::Released);
  EXPECT_EQ(t.token_state(c, 0), TokenState::Released);  // not the policy's choice
  EXPECT_EQ(t.slot_state(a_blocks[0], 0), SlotState::Live);
  EXPECT_EQ(t.slot_state(a_blocks[0], 1), SlotState::Hole);
  EXPECT_EQ(t.slot_state(a_blocks[1], 0), SlotState::Live);
  EXPECT_EQ(t.slot_state(a_blocks[1], 1), SlotState::Room);
  EXPECT_EQ(t.slot_state(d_blocks[0], 0), SlotState::Live);
  EXPECT_EQ(t.slot_state(d_blocks[0], 1), SlotState::Room);  // written before, by c: not a hole of d's
  int free_slots = 0;
  for (int block = 0; block < 4; ++block)
    for (int slot = 0; slot < 2; ++slot) free_slots += t.slot_state(block, slot) == SlotState::Free;
  EXPECT_EQ(free_slots, 2);  // the one of b's and c's blocks that d did not take

  t.seek(0);  // nothing written yet
  EXPECT_EQ(t.token_state(a, 0), TokenState::Future);
  EXPECT_EQ(t.slot_state(a_blocks[0], 0), SlotState::Free);
}

// A model run's scores are those of the sequence's last round that began before the
// cursor: at the cursor of its RoundBegin (not yet applied) the round has none.
TEST(VizTimeline, ARoundsScoresShowOnceItsRoundBeginIsApplied) {
  viz::Run run;
  run.round_scores.push_back({2, 0, {0, 1, 2}, {5, 6, 7}});
  EXPECT_FALSE(ScoresAt(run, 2, {})(0, 1).has_value());
  EXPECT_EQ(ScoresAt(run, 3, {})(0, 1).value_or(-1), 6.0);
  EXPECT_FALSE(ScoresAt(run, 3, {})(0, 3).has_value());  // a position the round did not score
}

// A synthetic run's importance is asked only of written tokens: the next position
// (the sequence's next_pos) has no score yet.
TEST(VizTimeline, TheNextPositionHasNoScoreYet) {
  viz::Run run;
  run.importance = [](int, int64_t pos, int64_t now) { return double(now - pos); };
  const ScoresAt scores(run, 0, {5});
  EXPECT_EQ(scores(0, 4).value_or(-1), 1.0);
  EXPECT_FALSE(scores(0, 5).has_value());
  EXPECT_FALSE(scores(1, 0).has_value());  // a sequence with no tokens yet
}

// Shading runs from the live tokens' 5th to their 95th percentile score; when every
// live token scores the same, each is shaded 0 (not NaN, which the colours cannot take).
TEST(VizTimeline, ShadingSpansTheFifthToTheNinetyFifthPercentile) {
  viz::Run run;
  run.importance = [](int, int64_t pos, int64_t) { return double(pos); };
  ScoresAt scores(run, 0, {100});
  std::vector<std::pair<int, int64_t>> live;
  for (int64_t p = 0; p < 100; ++p) live.push_back({0, p});
  scores.fit(live);  // 100 scores 0..99: lo = s[5] = 5, hi = s[94] = 94
  EXPECT_FLOAT_EQ(scores.shade(5), 0.0f);
  EXPECT_FLOAT_EQ(scores.shade(49.5), 0.5f);
  EXPECT_FLOAT_EQ(scores.shade(94), 1.0f);
  viz::Run flat;
  flat.importance = [](int, int64_t, int64_t) { return 3.0; };
  ScoresAt same(flat, 0, {100});
  same.fit(live);
  EXPECT_EQ(same.shade(3.0), 0.0f);
}

// The pool and the sequence strip shade by one fit (they once fitted two samples,
// one by slot and one by position, and could shade a token differently): that of
// the live tokens, every one of them in a pool under 8,192 slots.
TEST(VizTimeline, ThePoolAndTheStripShadeByTheLiveTokensScores) {
  const Recording rec = record(small_streaming("importance", "heavy-tailed"), {});
  Timeline t(rec.runs[0]);
  t.seek(t.size() / 2);
  const ScoresAt fitted = scores_for_shading(t);
  ASSERT_TRUE(fitted.known());
  ScoresAt all(t.run(), t.cursor(), t.counters().next_pos);
  std::vector<std::pair<int, int64_t>> live;
  for (int64_t p = 0; p < t.counters().next_position(0); ++p)
    if (t.locate(0, p).block >= 0) live.emplace_back(0, p);
  ASSERT_GT(live.size(), 20u);
  all.fit(live);
  for (double score : {0.5, 1.0, 1.2, 1.5, 2.0, 5.0}) EXPECT_FLOAT_EQ(fitted.shade(score), all.shade(score)) << score;
}

// Each scenario shows the memory strategies its description names: "streaming-budget"
// compaction alone (the sawtooth), "reuse-vs-compact" hole reuse beside compaction.
TEST(VizScenarios, EachShowsTheStrategiesItsDescriptionNames) {
  using MS = MemoryStrategy;
  EXPECT_EQ(find_scenario("streaming-budget")->settings.strategies, std::vector<MS>{MS::Compact});
  EXPECT_EQ(find_scenario("reuse-vs-compact")->settings.strategies, (std::vector<MS>{MS::ReuseHoles, MS::Compact}));
  EXPECT_EQ(find_scenario("compaction-on-off")->settings.strategies, (std::vector<MS>{MS::HolesOnly, MS::Compact}));
}

// A synthetic run's cost of a token, as the app prints it, is Qwen3-0.6B's, factor by factor.
TEST(VizScenarios, ASyntheticTokenCostsWhatQwen3_0_6BsDoes) {
  const Recording rec = record(small_one_shot(), {});
  EXPECT_EQ(rec.runs[0]->bytes_per_token, 2 * 28 * 8 * 128 * 4);
  EXPECT_EQ(rec.runs[0]->token_cost, "2 (K, V) x 28 layers x 8 KV heads x 128 dims x 4 bytes (f32 cache), Qwen3-0.6B");
}

// Sequences sharing a pool: sequence k writes tokens x {1, 0.75, 0.9, 0.6}[k] tokens and
// starts tokens/8 x k steps late (sequence 0 has written that many, and one more, when
// k writes its first), so the rounds do not line up.
TEST(VizScenarios, SharedPoolSequencesDifferInLengthAndStart) {
  RunSettings settings = find_scenario("three-sequences")->settings;
  settings.tokens = 800;
  settings.budget = 96;
  settings.slack = 32;
  const Recording rec = record(settings, {});
  std::vector<int64_t> written(3, 0), seq0_before(3, -1);
  for (const Event& e : rec.runs[0]->events) {
    if (e.kind != EventKind::SlotWritten) continue;
    if (seq0_before[size_t(e.seq)] < 0) seq0_before[size_t(e.seq)] = written[0];
    ++written[size_t(e.seq)];
  }
  EXPECT_EQ(written, (std::vector<int64_t>{800, 600, 720}));
  EXPECT_EQ(seq0_before, (std::vector<int64_t>{0, 101, 201}));
}

// A model run fits the model's context: the prompt is cut to half of it (at most 384
// tokens), the rest is generated, and the note says so. On the tiny model (512
// positions, hidden size 64) a short run instead gets the tiny model's note.
TEST(VizScenarios, AModelRunFitsTheContextAndSaysSo) {
  const ModelSource tiny{std::string(KVSCOPE_SOURCE_DIR) + "/tests/models/tiny-tied", ""};
  RunSettings s = find_scenario("h2o-model")->settings;
  s.strategies = {MemoryStrategy::Compact};
  s.tokens = 32;
  EXPECT_EQ(record(s, tiny).note.rfind("a tiny model: its attention is near-uniform", 0), 0u);
  s.tokens = 300;
  // A prompt of about 320 tokens: over half the context, under the 384 cap.
  for (int i = 0; i < 16; ++i) s.prompt += "The json module reads a file. ";
  const Recording rec = record(s, tiny);
  EXPECT_EQ(rec.note, "the model's context is 512 tokens: 256 prompt + 256 new");
  ASSERT_EQ(rec.runs.size(), 1u);
  EXPECT_EQ(rec.runs[0]->token_text.at(0).size(), 512u);
}

// record() shows one or two strategies and one to four sequences; anything else is refused.
TEST(VizScenarios, RecordRefusesWhatTheViewsCannotShow) {
  using MS = MemoryStrategy;
  RunSettings s = small_one_shot();
  s.strategies = {MS::HolesOnly, MS::ReuseHoles, MS::Compact};
  try {
    record(s, {});
    ADD_FAILURE() << "three strategies: no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "choose one or two memory strategies to show");
  }
  s = small_one_shot();
  s.sequences = 5;
  try {
    record(s, {});
    ADD_FAILURE() << "five sequences: no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "sequences must be between 1 and 4");
  }
}

}  // namespace
}  // namespace kvscope::viz
