#include "run.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "util/error.h"

namespace kvscope::viz {

std::shared_ptr<const Run> load_trace_run(const std::string& path) {
  Trace trace = read_trace(path);
  auto run = std::make_shared<Run>();
  run->label = strategy_name(trace.header.strategy);
  run->header = std::move(trace.header);
  run->events = std::move(trace.events);
  const auto meta = [&](const char* key) {
    const auto it = run->header.meta.find(key);
    return it == run->header.meta.end() ? std::string() : it->second;
  };
  run->policy = meta("policy");
  run->source = meta("source");
  const std::string bytes = meta("bytes_per_token");
  if (!bytes.empty()) {
    char* end = nullptr;
    const long long n = std::strtoll(bytes.c_str(), &end, 10);
    if (*end != '\0' || n < 0) throw file_error(path, "bytes_per_token=" + bytes + " is not a byte count");
    run->bytes_per_token = n;
  }
  int sequences = 0;
  for (const Event& e : run->events) sequences = std::max(sequences, e.seq + 1);
  run->sequences = std::max(sequences, 1);
  return run;
}

std::string trace_summary(const Run& run) {
  std::string out = "kvscope " + (run.source.empty() ? std::string("(unknown source)") : run.source) + " --trace:";
  const char* sep = " ";
  for (const auto& [key, value] : run.header.meta) {
    if (key == "source") continue;
    out += sep + key + "=" + value;
    sep = ", ";
  }
  return out + sep + std::to_string(run.events.size()) + " events";
}

const std::string& Run::text(int seq, int64_t pos) const {
  static const std::string none;
  if (seq < 0 || seq >= int(token_text.size())) return none;
  const auto& t = token_text[size_t(seq)];
  return pos >= 0 && pos < int64_t(t.size()) ? t[size_t(pos)] : none;
}

ScoresAt::ScoresAt(const Run& run, size_t cursor, const std::vector<int64_t>& next_pos)
    : run_(&run), next_pos_(next_pos) {
  for (const RoundScores& r : run.round_scores) {
    if (r.event >= cursor) break;  // in event order
    if (r.seq >= int(round_.size())) round_.resize(size_t(r.seq) + 1, nullptr);
    round_[size_t(r.seq)] = &r;
  }
}

std::optional<double> ScoresAt::operator()(int seq, int64_t pos) const {
  if (run_->importance) {
    const int64_t now = seq < int(next_pos_.size()) ? next_pos_[size_t(seq)] : 0;
    if (pos >= now) return std::nullopt;
    return run_->importance(seq, pos, now);
  }
  if (seq < 0 || seq >= int(round_.size()) || !round_[size_t(seq)]) return std::nullopt;
  const RoundScores& r = *round_[size_t(seq)];
  const auto it = std::lower_bound(r.pos.begin(), r.pos.end(), pos);
  if (it == r.pos.end() || *it != pos) return std::nullopt;
  return r.score[size_t(it - r.pos.begin())];
}

void ScoresAt::fit(const std::vector<std::pair<int, int64_t>>& live) {
  std::vector<double> s;
  s.reserve(live.size());
  for (const auto& [seq, pos] : live)
    if (auto v = (*this)(seq, pos); v && std::isfinite(*v)) s.push_back(*v);
  if (s.size() < 2) return;
  const size_t a = s.size() / 20, b = s.size() - 1 - s.size() / 20;
  std::nth_element(s.begin(), s.begin() + long(a), s.end());
  lo_ = s[a];
  std::nth_element(s.begin(), s.begin() + long(b), s.end());
  hi_ = s[b];
  if (!(hi_ > lo_)) hi_ = lo_ + 1;
}

float ScoresAt::shade(double score) const { return float(std::clamp((score - lo_) / (hi_ - lo_), 0.0, 1.0)); }

}  // namespace kvscope::viz
