#include "run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope::viz {

std::string printable(const std::string& bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool valid = len > 0 && i + size_t(len) <= bytes.size();
    for (int k = 1; valid && k < len; ++k) valid = (static_cast<unsigned char>(bytes[i + size_t(k)]) >> 6) == 2;
    if (valid && len == 1 && (c < 0x20 || c == 0x7f)) {
      out += c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : "";
      if (c != '\n' && c != '\t' && c != '\r') {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02X", c);
        out += buf;
      }
      ++i;
    } else if (valid) {
      out.append(bytes, i, size_t(len));
      i += size_t(len);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      ++i;
    }
  }
  return out;
}

namespace {

// The text of the tokens a trace lists ("tokens.S", cache/trace.h), read with the
// tokenizer of the model its header names. Without that tokenizer the run keeps
// no text (the app then shows positions), and `text_note` says why.
void read_token_text(Run& run, const std::string& path) {
  const std::map<int, std::vector<int>> ids = trace_token_ids(run.header, path);
  if (ids.empty()) return;
  const std::string model = run.meta("model");
  if (model.empty()) {
    run.text_note = "token ids, but no model named to read them with: positions shown";
    return;
  }
  const std::string tokenizer_json = model + "/tokenizer.json";
  if (!file_exists(tokenizer_json)) {
    run.text_note = "token ids, but no " + tokenizer_json + " to read them: positions shown";
    return;
  }
  const Tokenizer tokenizer = Tokenizer::load(tokenizer_json);
  for (const auto& [seq, seq_ids] : ids) {
    if (seq >= int(run.token_text.size())) run.token_text.resize(size_t(seq) + 1);
    for (int id : seq_ids) {
      if (id >= tokenizer.vocab_size())
        throw file_error(path, "token id " + std::to_string(id) + " of sequence " + std::to_string(seq) +
                                   " is not in " + tokenizer_json + " (" + std::to_string(tokenizer.vocab_size()) +
                                   " tokens)");
      run.token_text[size_t(seq)].push_back(printable(tokenizer.token_bytes(id)));
    }
  }
  run.text_note = "token text from " + tokenizer_json;
  run.tokenizer_json = tokenizer_json;
}

}  // namespace

std::string Run::score_meaning() const {
  if (importance) return "the workload's importance of the token now";
  if (policy == "h2o") return "H2O: attention received so far, as of the last round";
  if (policy == "snapkv") return "SnapKV: the observation window's pooled votes, as of the last round";
  if (policy == "triattention") return "TriAttention: the key's predicted attention, as of the last round";
  return policy + ", as of the last round";
}

std::shared_ptr<Run> load_trace_run(const std::string& path) {
  Trace trace = read_trace(path);
  auto run = std::make_shared<Run>();
  run->traced = true;
  run->label = strategy_name(trace.header.strategy);
  run->header = std::move(trace.header);
  run->events = std::move(trace.events);
  run->policy = run->meta("policy");
  run->source = run->meta("source");
  // A run without eviction (generate without --budget, serve-bench's "none") still
  // names a memory strategy, the one its cache was built with; it never used it.
  if (run->policy == "none") run->label = "none";
  const std::string bytes = run->meta("bytes_per_token");
  if (!bytes.empty()) {
    char* end = nullptr;
    const long long n = std::strtoll(bytes.c_str(), &end, 10);
    if (*end != '\0' || n < 0) throw file_error(path, "bytes_per_token=" + bytes + " is not a byte count");
    // 64 GiB a token, far above any model's K/V (Qwen3-0.6B: 224 KiB in f32): the
    // pool's bytes, up to 2^26 slots of it, still fit the counters' int64.
    constexpr long long kMostBytesPerToken = 1LL << 36;
    if (n > kMostBytesPerToken)
      throw file_error(path, "bytes_per_token=" + bytes + " is more than " + std::to_string(kMostBytesPerToken));
    run->bytes_per_token = n;
  }
  int sequences = 0;
  for (const Event& e : run->events) sequences = std::max(sequences, e.seq + 1);
  run->sequences = std::max(sequences, 1);
  read_token_text(*run, path);
  return run;
}

std::vector<std::shared_ptr<const Run>> load_trace_runs(const std::vector<std::string>& paths) {
  if (paths.empty() || paths.size() > 2) throw Error("--trace: give one trace, or two to compare side by side");
  std::vector<std::shared_ptr<Run>> runs;
  for (const std::string& path : paths) runs.push_back(load_trace_run(path));
  if (runs.size() == 2 && runs[0]->label == runs[1]->label)
    for (size_t i = 0; i < runs.size(); ++i) runs[i]->name = file_name(paths[i]);
  return {runs.begin(), runs.end()};
}

const std::string& view_label(const Run& run) { return run.name.empty() ? run.label : run.name; }

std::string trace_summary(const Run& run, const Run* right) {
  std::string out = "kvscope " + (run.source.empty() ? std::string("(unknown source)") : run.source) + " --trace:";
  const char* sep = " ";
  for (const auto& [key, value] : run.header.meta) {
    if (key == "source" || key.rfind("tokens.", 0) == 0) continue;  // token ids: too long to list
    out += sep + key + "=" + value;
    sep = ", ";
  }
  out += sep + commas(int64_t(run.events.size())) + " events";
  if (right) out += " on the left, " + commas(int64_t(right->events.size())) + " on the right";
  return run.text_note.empty() ? out : out + "; " + run.text_note;
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
