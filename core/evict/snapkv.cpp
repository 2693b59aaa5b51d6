#include "evict/snapkv.h"

namespace kvscope {

void SnapKVPolicy::observe(const std::vector<int64_t>& pos, const std::vector<float>& attention, int n_queries) {
  Step step{n_queries, {}};
  for (size_t i = 0; i < pos.size(); ++i) step.votes[pos[i]] = attention[i];
  steps_.push_back(std::move(step));
  // Drop the oldest steps while the others still cover the window.
  int covered = 0;
  for (const Step& s : steps_) covered += s.n_queries;
  while (steps_.size() > 1 && covered - steps_.front().n_queries >= kWindow) {
    covered -= steps_.front().n_queries;
    steps_.pop_front();
  }
}

std::vector<float> SnapKVPolicy::scores(const ScoreContext& ctx) {
  const int n = int(ctx.pos.size());
  std::vector<float> votes(size_t(n), 0.0f);
  for (const Step& s : steps_)
    for (int i = 0; i < n; ++i)
      if (auto it = s.votes.find(ctx.pos[i]); it != s.votes.end()) votes[i] += it->second;
  // Average pool, width 5, zero padding (as F.avg_pool1d(kernel 5, padding 2, stride 1)).
  std::vector<float> pooled(size_t(n), 0.0f);
  for (int i = 0; i < n; ++i) {
    float sum = 0.0f;
    for (int j = i - kPool / 2; j <= i + kPool / 2; ++j)
      if (j >= 0 && j < n) sum += votes[j];
    pooled[i] = sum / kPool;
  }
  return pooled;
}

}  // namespace kvscope
