#include "evict/oracle.h"

#include "cache/kv_cache.h"
#include "model/qwen3.h"
#include "util/error.h"

namespace kvscope {

FutureAttention::FutureAttention(int64_t first_query, std::vector<std::vector<float>> rows)
    : first_query_(first_query), suffix_(std::move(rows)) {
  // Turn per-query rows into suffix sums, from the last query back.
  for (size_t i = suffix_.size(); i-- > 1;) {
    std::vector<float>& earlier = suffix_[i - 1];
    const std::vector<float>& later = suffix_[i];
    for (size_t p = 0; p < earlier.size(); ++p) earlier[p] += later[p];
  }
}

float FutureAttention::received_from(int64_t now, int64_t p) const {
  const int64_t i = std::max<int64_t>(0, now - first_query_);
  if (i >= int64_t(suffix_.size()) || p < 0 || p >= int64_t(suffix_[i].size())) return 0.0f;
  return suffix_[i][p];
}

FutureAttention record_future_attention(const Model& model, const std::vector<int>& prompt,
                                        const std::vector<int>& continuation) {
  if (prompt.empty()) throw Error("oracle: the prompt is empty");
  const ModelConfig& c = model.config;
  const int block_size = 16, n = int(prompt.size() + continuation.size());
  PagedKvCache cache(int(blocks_for_tokens(n, block_size)), block_size, MemoryStrategy::HolesOnly);
  KvStorage kv(c, cache.num_blocks(), block_size);
  const int seq = cache.add_sequence();
  RunState state;
  forward(model, cache, kv, seq, state, prompt.data(), int(prompt.size()));

  std::vector<float> sums;
  ForwardOptions eager;
  eager.attention = AttentionPath::Eager;
  eager.prob_sums = &sums;
  std::vector<std::vector<float>> rows;
  for (int token : continuation) {
    forward(model, cache, kv, seq, state, &token, 1, eager);
    // Full cache, no holes: table slot j holds position j.
    const size_t table = sums.size() / (size_t(c.num_layers) * c.num_heads);
    const size_t live = size_t(cache.sequence(seq).live);
    std::vector<float> row(live, 0.0f);
    for (size_t lh = 0; lh < size_t(c.num_layers) * c.num_heads; ++lh)
      for (size_t p = 0; p < live; ++p) row[p] += sums[lh * table + p];
    rows.push_back(std::move(row));
  }
  return FutureAttention(int64_t(prompt.size()), std::move(rows));
}

}  // namespace kvscope
