#include "serve/serve_bench.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "util/clock.h"
#include "util/error.h"

namespace kvscope {

static double mean(const std::vector<int>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

double ServeRun::mean_running() const { return mean(stats.running); }
double ServeRun::mean_blocks_in_use() const { return mean(stats.blocks_in_use); }


EngineConfig engine_for_strategy(const std::string& strategy, const EngineConfig& evicting) {
  EngineConfig c = evicting;
  if (strategy == "none") {
    c.schedule.budget = 0;
    c.strategy = MemoryStrategy::HolesOnly;  // nothing is evicted, so no strategy acts
    return c;
  }
  c.strategy = parse_strategy(strategy);
  if (!c.schedule.enabled()) throw Error("strategy " + strategy + " needs an eviction budget > 0");
  return c;
}

void warm_up(const Model& model, const EngineConfig& evicting, const std::vector<int>& prompt) {
  if (prompt.empty()) return;
  const std::vector<int> start(prompt.begin(), prompt.begin() + std::min<size_t>(prompt.size(), 16));
  EngineConfig c = engine_for_strategy("none", evicting);
  c.num_blocks = int(blocks_for_tokens(int64_t(start.size()) + 1, c.block_size));
  Engine engine(model, c);
  const int seq = engine.add_sequence();
  engine.prefill(seq, start);
  engine.step_batch({BatchItem{seq, {start[0]}}});
}

ServeRun serve_requests(const Model& model, const std::string& strategy, const EngineConfig& evicting,
                        const ServeConfig& serve, const std::vector<std::vector<int>>& prompts, int new_tokens,
                        const std::function<void(int, int)>& progress, EventLog* events,
                        std::vector<Request>* stopped) {
  Engine engine(model, engine_for_strategy(strategy, evicting), events);
  Scheduler scheduler(engine, serve);
  for (const std::vector<int>& p : prompts) scheduler.submit(p, new_tokens);

  ServeRun run;
  run.strategy = strategy;
  run.backend = engine.backend().name();
  const double t0 = now_seconds();
  const auto finished = [&] {
    int n = 0;
    for (int i = 0; i < scheduler.num_requests(); ++i) n += scheduler.request(i).finished;
    return n;
  };
  const auto requests = [&] {
    std::vector<Request> all;
    for (int i = 0; i < scheduler.num_requests(); ++i) all.push_back(scheduler.request(i));
    return all;
  };
  try {
    while (scheduler.step())
      if (progress) progress(finished(), scheduler.num_requests());
  } catch (const PoolExhausted&) {
    if (stopped) *stopped = requests();
    throw;
  }
  run.seconds = now_seconds() - t0;
  run.stats = scheduler.stats();
  run.finished = finished();
  run.requests = requests();
  if (progress) progress(run.finished, scheduler.num_requests());
  return run;
}

std::string markdown_table(const std::vector<ServeRun>& runs) {
  std::string out =
      "| strategy | peak concurrent sequences | mean concurrent sequences | tokens/s | preemptions | recomputed tokens | blocks in use, mean (peak) "
      "| bytes moved by compaction | steps | finished | wall time |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  char line[512];
  for (const ServeRun& r : runs) {
    std::snprintf(line, sizeof line, "| %s | %d | %.1f | %.0f | %d | %lld | %.1f (%d) | %.2f MB | %d | %d | %.1f s |\n",
                  r.strategy.c_str(), r.stats.peak_running, r.mean_running(), r.tokens_per_second(), r.stats.preemptions,
                  (long long)r.stats.recomputed_tokens, r.mean_blocks_in_use(), r.stats.peak_blocks,
                  r.stats.bytes_moved / 1e6, r.stats.steps, r.finished, r.seconds);
    out += line;
  }
  return out;
}

}  // namespace kvscope
