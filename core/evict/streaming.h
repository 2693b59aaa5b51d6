// StreamingLLM (Xiao et al., 2023): keep the attention sinks and a window of the
// most recent tokens, nothing else. Every score is equal, so select_keep fills the
// budget beyond the protected tokens with the newest ones (on equal scores the newer
// token wins, evict/policy.cpp): sinks + the last W, W = budget - sinks.
#pragma once

#include "evict/policy.h"

namespace kvscope {

class StreamingPolicy : public EvictionPolicy {
 public:
  std::string name() const override { return "streaming"; }
  std::vector<float> scores(const ScoreContext& ctx) override { return std::vector<float>(ctx.pos.size(), 0.0f); }
};

}  // namespace kvscope
