// The oracle: keeps the tokens that the full-cache run attends to most *later*.
//
// Not a real policy (it needs the future), and not an upper bound either: the
// attention a token will receive, summed over every later query, layer and head, is
// a heuristic for what the model will need, not the loss it will cost. On the
// bundled model, at 10% kept, its perplexity is behind every real policy's but
// H2O's (kvscope eval). It answers another question: are the tokens the model will
// read later scattered over the blocks (tutorial 6)?
//
// record_future_attention() runs the model once with the full cache over a fixed
// token sequence (prompt + continuation, teacher-forced) and records, for every
// decode step, the attention each earlier token received (summed over layers and
// heads). At a round at position `now`, a token's score is the attention it will
// receive from all queries at positions >= now.
//
// Memory: one row per decode step over all earlier tokens, n^2/2 floats for n
// tokens (50 MB at 5,000 tokens): fine for the bundled model's contexts.
#pragma once

#include <vector>

#include "evict/policy.h"
#include "model/weights.h"

namespace kvscope {

class FutureAttention {
 public:
  // suffix_[i][p]: attention token p receives from decode queries i, i+1, ... (positions first_query + i ...)
  FutureAttention(int64_t first_query, std::vector<std::vector<float>> rows);
  // Attention position p receives from the queries at positions >= now.
  float received_from(int64_t now, int64_t p) const;

 private:
  int64_t first_query_;
  std::vector<std::vector<float>> suffix_;
};

// Runs prompt + continuation through the model with the full cache (eager attention).
FutureAttention record_future_attention(const Model& model, const std::vector<int>& prompt,
                                        const std::vector<int>& continuation);

class OraclePolicy : public EvictionPolicy {
 public:
  explicit OraclePolicy(const FutureAttention& future) : future_(future) {}
  std::string name() const override { return "oracle"; }
  std::vector<float> scores(const ScoreContext& ctx) override {
    std::vector<float> s(ctx.pos.size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = future_.received_from(ctx.now, ctx.pos[i]);
    return s;
  }

 private:
  const FutureAttention& future_;
};

}  // namespace kvscope
