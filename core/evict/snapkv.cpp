#include "evict/snapkv.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

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
  // The window: the newest kWindow positions (fewer, while fewer queries have come).
  // The voters, the steps kept, hold at least those kWindow queries, and up to 63
  // when a prefill's last 32 are among them.
  int covered = 0;
  for (const Step& s : steps_) covered += s.n_queries;
  const int64_t window_start = ctx.now - std::min(covered, kWindow);

  // votes(j): the attention the voters gave key j, for the keys before the window
  // only (SnapKV's attn[..., -w:, :-w].sum(-2)).                            [n]
  const int n = int(ctx.pos.size());
  std::vector<float> votes(size_t(n), 0.0f);
  for (const Step& s : steps_)
    for (int i = 0; i < n && ctx.pos[i] < window_start; ++i)
      if (auto it = s.votes.find(ctx.pos[i]); it != s.votes.end()) votes[i] += it->second;

  // score(j) = (1/5) sum of votes(i) over the keys i within 2 positions of j: an
  // average pool of width 5 with zero padding, where an evicted neighbour and a
  // window key count as padding (on the first round, exactly F.avg_pool1d(kernel 5,
  // padding 2) over the prefix). The window is always kept: score +inf.
  std::vector<float> pooled(size_t(n), 0.0f);
  for (int j = 0; j < n; ++j) {
    if (ctx.pos[j] >= window_start) {
      pooled[j] = std::numeric_limits<float>::infinity();
      continue;
    }
    float sum = 0.0f;  // positions ascend, so the keys within 2 positions are within 2 entries
    for (int i = std::max(0, j - kPool / 2); i <= std::min(n - 1, j + kPool / 2); ++i)
      if (std::abs(ctx.pos[i] - ctx.pos[j]) <= kPool / 2) sum += votes[i];
    pooled[j] = sum / kPool;
  }
  return pooled;
}

}  // namespace kvscope
