#include "evict/policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>

#include "evict/h2o.h"
#include "evict/random.h"
#include "evict/snapkv.h"
#include "evict/streaming.h"
#include "evict/triattention.h"
#include "util/error.h"

namespace kvscope {

void EvictionSchedule::validate() const {
  // Each value by its flag (the app's fields have the same names), with what was given.
  // The ceiling keeps budget + slack and sinks + recent (and a prefill chunk on top)
  // inside an int.
  for (const auto& [name, value, least] : {std::tuple{"budget", budget, 0}, std::tuple{"slack", slack, 1},
                                           std::tuple{"sinks", sinks, 0}, std::tuple{"recent", recent, 0}})
    if (value < least || value > kMaxScheduleTokens)
      throw Error(std::string("--") + name + " must be from " + std::to_string(least) + " to " +
                  std::to_string(kMaxScheduleTokens) + " (2^29), got " + std::to_string(value));
  if (enabled() && budget < sinks + recent)
    throw Error("--budget " + std::to_string(budget) + " is smaller than the protected tokens (--sinks " +
                std::to_string(sinks) + " + --recent " + std::to_string(recent) + ")");
}

std::vector<int64_t> select_keep(const std::vector<int64_t>& pos, const std::vector<float>& scores,
                                 const EvictionSchedule& schedule) {
  const int n = int(pos.size());
  if (int(scores.size()) != n) throw Error("select_keep: one score per position needed");
  // The selection orders scores; NaN has no order (nth_element's comparison would not
  // be a strict weak order, which is undefined behaviour). It comes from a model whose
  // activations are not finite. (+inf is a score: SnapKV's window always stays.)
  for (int i = 0; i < n; ++i)
    if (std::isnan(scores[i]))
      throw Error("eviction: position " + std::to_string(pos[i]) +
                  " scored NaN: the model's attention is not finite (its activations overflowed, or its "
                  "weights hold NaN or inf)");
  if (n <= schedule.budget) return pos;

  // Protected: the first `sinks` positions and the newest `recent` tokens.
  std::vector<char> keep(size_t(n), 0);
  int kept = 0;
  for (int i = 0; i < n; ++i)
    if (pos[i] < schedule.sinks || i >= n - schedule.recent) keep[i] = 1, ++kept;

  // The rest by score, best first; on equal scores the newer token wins. Only
  // the set of the best matters, not their order: nth_element finds it in O(n).
  std::vector<int> order;
  for (int i = 0; i < n; ++i)
    if (!keep[i]) order.push_back(i);
  const int take = std::clamp(schedule.budget - kept, 0, int(order.size()));
  std::nth_element(order.begin(), order.begin() + take, order.end(), [&](int a, int b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && pos[a] > pos[b]);
  });
  for (int k = 0; k < take; ++k) keep[order[k]] = 1;
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i)
    if (keep[i]) out.push_back(pos[i]);
  return out;
}

std::vector<int64_t> complement(const std::vector<int64_t>& pos, const std::vector<int64_t>& keep) {
  std::vector<int64_t> out;
  std::set_difference(pos.begin(), pos.end(), keep.begin(), keep.end(), std::back_inserter(out));
  return out;
}

std::unique_ptr<EvictionPolicy> make_policy(const std::string& name, uint64_t seed) {
  if (name == "streaming") return std::make_unique<StreamingPolicy>();
  if (name == "random") return std::make_unique<RandomPolicy>(seed);
  if (name == "h2o") return std::make_unique<H2OPolicy>();
  if (name == "snapkv") return std::make_unique<SnapKVPolicy>();
  if (name == "triattention" || name == "oracle")
    throw Error("policy \"" + name + "\" needs data (calibration or a reference run); build it with its own constructor");
  throw Error("unknown eviction policy \"" + name + "\" (choose streaming, h2o, snapkv, triattention, random or oracle)");
}

uint64_t random_policy_seed(uint64_t seed, uint64_t k) {
  SplitMix64 stream(seed ^ 0x52414E444F4D5053ull);  // "RANDOMPS": apart from the sampler's SplitMix64(seed)
  stream.state += k * SplitMix64::kGamma;            // skip to the k-th number
  return stream.next();
}

void check_budget_holds_the_window(const std::string& policy, const EvictionSchedule& s) {
  if (policy != "snapkv" || !s.enabled() || s.recent >= SnapKVPolicy::kWindow) return;
  // At budget == sinks + window the window fills what the sinks leave: the run is
  // StreamingLLM's, event for event.
  if (s.budget <= s.sinks + SnapKVPolicy::kWindow)
    throw Error("eviction budget " + std::to_string(s.budget) + " leaves nothing beyond the tokens snapkv protects (" +
                std::to_string(s.sinks) + " sinks + its observation window, the newest " +
                std::to_string(SnapKVPolicy::kWindow) + "): its votes would never choose a token");
}

PolicyFactory policy_factory(const std::string& name, uint64_t seed, const std::string& calibration_file,
                             const ModelConfig& config) {
  if (name == "triattention") {
    if (calibration_file.empty()) throw Error("policy triattention needs a calibration file (make one with kvscope calibrate)");
    auto cal = std::make_shared<const TriCalibration>(TriCalibration::load(calibration_file, config));
    return [cal] { return std::make_unique<TriAttentionPolicy>(cal); };
  }
  make_policy(name, seed);  // a bad name fails now, not at the first sequence
  return [name, seed, k = uint64_t(0)]() mutable { return make_policy(name, random_policy_seed(seed, k++)); };
}

}  // namespace kvscope
