// The model after eviction against PyTorch, on any backend: tests/fixtures/<name>-evicted.json,
// made by tests/reference/make_evicted_fixtures.py. The reference deletes an evicted
// token's row from a cache kept in token order; the paged cache leaves a hole, refills
// it, or slides the survivors forward. Blocks of 4, so that holes are left in most
// blocks and round 2 (and tiny-gqa5's round 1) empties some; under reuse round 2's
// chunk of 6 lands in holes, out of table order. Every row is compared: 12 decode steps, the chunk's 6 rows, 12
// more steps, within 1e-4. A cache that numbered new tokens by the live count, or
// masked by slot, would be whole units off.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/weights.h"
#include "test_paths.h"
#include "util/file.h"
#include "util/max_abs_diff.h"

namespace kvscope::test {

inline void check_after_eviction(const std::string& name, MemoryStrategy strategy, AttentionPath path,
                                 const BackendFactory& make_backend) {
  SCOPED_TRACE(name + ", " + strategy_name(strategy) + (path == AttentionPath::Eager ? ", eager" : ", flash"));
  const Model model = load_model(tiny_model(name));
  const auto fixture = nlohmann::json::parse(read_file(source_path("tests/fixtures/" + name + "-evicted.json")));
  const std::vector<int> prompt = fixture["prompt_ids"].get<std::vector<int>>();
  ASSERT_EQ(fixture["rounds"].size(), 2u);
  constexpr int kBlockSize = 4;
  PagedKvCache cache(24, kBlockSize, strategy);  // 96 slots for the 70 tokens written
  const std::unique_ptr<Backend> backend = make_backend(model, cache.num_blocks(), kBlockSize);
  const int seq = cache.add_sequence();
  ForwardOptions one, all;
  one.attention = all.attention = path;
  all.all_logits = true;
  backend->forward(cache, seq, prompt.data(), int(prompt.size()), one);
  const size_t vocab = size_t(model.config.vocab_size);
  auto off_by = [&](const float* got, const nlohmann::json& want) {
    const std::vector<float> w = want.get<std::vector<float>>();
    return w.size() == vocab ? max_abs_diff(got, w.data(), vocab) : INFINITY;
  };
  for (const auto& round : fixture["rounds"]) {
    cache.evict(seq, round["evict"].get<std::vector<int64_t>>());
    if (strategy == MemoryStrategy::Compact) {
      const std::vector<Move> plan = cache.plan_compaction(seq);
      backend->compact(plan);
      cache.commit_compaction(seq, plan);
    }
    if (round.contains("chunk_ids")) {
      const std::vector<int> chunk = round["chunk_ids"].get<std::vector<int>>();
      const float* logits = backend->forward(cache, seq, chunk.data(), int(chunk.size()), all);
      const std::vector<int64_t> table_order = cache.live_positions(seq);
      if (strategy == MemoryStrategy::ReuseHoles) {  // what this case is for: a table out of token order
        EXPECT_FALSE(std::is_sorted(table_order.begin(), table_order.end())) << "the chunk reused no hole";
      }
      ASSERT_EQ(round["chunk_logits"].size(), chunk.size());
      for (size_t t = 0; t < chunk.size(); ++t)
        EXPECT_LE(off_by(logits + t * vocab, round["chunk_logits"][t]), 1e-4f) << "chunk row " << t;
    }
    const std::vector<int> fed = round["decode_ids"].get<std::vector<int>>();
    ASSERT_EQ(round["decode_logits"].size(), fed.size());
    for (size_t step = 0; step < fed.size(); ++step) {
      const float* logits = backend->forward(cache, seq, &fed[step], 1, one);
      EXPECT_LE(off_by(logits, round["decode_logits"][step]), 1e-4f) << "decode step " << step;
    }
  }
  EXPECT_EQ(cache.sequence(seq).live, 70 - 24 - 14) << "the rounds evicted what the fixture says";
}

}  // namespace kvscope::test
