// Chapter 2: pages, not arrays.
//
// Part 1: a paged cache small enough to print: a pool of blocks, two sequences
// taking turns, their block tables and the slot each position maps to.
// Part 2: the tiny test model decodes through paged caches of block size 1, 16
// and 256 (one block: a contiguous cache) and gets the same logits, bit for bit,
// and the logits PyTorch computed for the same tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "model/qwen3.h"
#include "model/weights.h"
#include "tutorial.h"
#include "util/file.h"
#include "util/max_abs_diff.h"

using namespace kvscope;
using namespace kvscope::tutorial;

// What a physical slot holds, as "sequence:position", or "." when empty.
std::string slot_label(const PagedKvCache& cache, int block, int slot) {
  const int64_t p = cache.position({block, slot});
  if (p == kEmpty) return ".";
  return std::to_string(cache.owner(block)) + ":" + std::to_string(p);
}

void part1_block_tables() {
  const int num_blocks = 6, block_size = 4;
  PagedKvCache cache(num_blocks, block_size, MemoryStrategy::HolesOnly);
  const int a = cache.add_sequence(), b = cache.add_sequence();
  // Two sequences arrive together and take turns: 3 tokens of a, 5 of b, 3 of a.
  for (int i = 0; i < 3; ++i) cache.append(a);
  for (int i = 0; i < 5; ++i) cache.append(b);
  for (int i = 0; i < 3; ++i) cache.append(a);

  std::printf("A pool of %d blocks of %d slots. Sequence %d writes 3 tokens, sequence %d writes 5, sequence %d 3 more.\n\n",
              num_blocks, block_size, a, b, a);
  std::printf("Physical blocks (each slot: sequence:position, . = empty):\n");
  for (int blk = 0; blk < num_blocks; ++blk) {
    std::printf("  block %d:", blk);
    for (int s = 0; s < block_size; ++s) std::printf(" %4s", slot_label(cache, blk, s).c_str());
    std::printf("%s\n", cache.owner(blk) < 0 ? "   (free)" : "");
  }
  std::printf("\nBlock tables (logical block i -> physical block):\n");
  for (int seq : {a, b}) {
    std::printf("  sequence %d: [", seq);
    const std::vector<int>& table = cache.sequence(seq).blocks;
    for (size_t i = 0; i < table.size(); ++i) std::printf("%s%d", i ? ", " : "", table[i]);
    std::printf("]\n");
  }

  std::printf("\nSlot mapping of sequence %d: position p -> (block table[p / %d], slot p %% %d)\n", a, block_size, block_size);
  const std::vector<int>& table = cache.sequence(a).blocks;
  std::printf("  position:");
  for (int64_t p : cache.live_positions(a)) std::printf(" %2lld", static_cast<long long>(p));
  std::printf("\n  block:   ");
  for (int64_t p : cache.live_positions(a)) std::printf(" %2d", table[p / block_size]);
  std::printf("\n  slot:    ");
  for (int64_t p : cache.live_positions(a)) std::printf(" %2lld", static_cast<long long>(p % block_size));
  std::printf("\n");
  // The mapping above is only a formula while nothing is evicted; the cache
  // records each slot's position, and that record is what attention reads.
  for (int64_t p : cache.live_positions(a)) {
    const SlotRef at{table[p / block_size], int(p % block_size)};
    if (cache.position(at) != p) std::printf("  (!) position %lld is not where the formula says\n", static_cast<long long>(p));
  }
}

// The logits of a prompt and of teacher-forced decode steps through a paged cache
// with the given block size: [prompt + steps, vocab]. Decode runs one token at a time.
std::vector<float> run(const Model& m, const std::vector<int>& prompt, const std::vector<int>& steps, int block_size,
                       int& blocks_used) {
  const int n = int(prompt.size() + steps.size());
  PagedKvCache cache((n + block_size - 1) / block_size, block_size, MemoryStrategy::HolesOnly);
  KvStorage kv(m.config, cache.num_blocks(), block_size);
  const int seq = cache.add_sequence();
  RunState state;
  ForwardOptions all;
  all.all_logits = true;
  const int vocab = m.config.vocab_size;

  const float* logits = forward(m, cache, kv, seq, state, prompt.data(), int(prompt.size()), all);
  std::vector<float> out(logits, logits + prompt.size() * vocab);
  for (int token : steps) {
    logits = forward(m, cache, kv, seq, state, &token, 1);
    out.insert(out.end(), logits, logits + vocab);
  }
  blocks_used = int(cache.sequence(seq).blocks.size());
  return out;
}

void part2_same_logits() {
  const std::string model_dir = "tests/models/tiny-untied";
  const std::string fixture_file = "tests/fixtures/tiny-untied.json";
  const Model m = load_model(repo_path(model_dir));
  const auto fixture = nlohmann::json::parse(read_file(repo_path(fixture_file)));
  const auto& c = fixture["cases"][0];
  const std::vector<int> prompt = c["prompt_ids"].get<std::vector<int>>();
  const std::vector<int> steps = c["decode_ids"].get<std::vector<int>>();
  std::vector<float> pytorch;
  for (const auto& row : c["prefill_logits"]) for (const auto& x : row) pytorch.push_back(x.get<float>());
  for (const auto& row : c["decode_logits"]) for (const auto& x : row) pytorch.push_back(x.get<float>());

  std::printf("\n%s (random weights: %d layers, %d query heads, %d KV heads, head_dim %d, vocab %d):\n",
              model_dir.c_str(), m.config.num_layers, m.config.num_heads, m.config.num_kv_heads, m.config.head_dim,
              m.config.vocab_size);
  std::printf("a %zu-token prompt, then %zu decode steps of one token (the tokens of %s)\n", prompt.size(),
              steps.size(), fixture_file.c_str());

  int contiguous_blocks = 0;
  const std::vector<float> contiguous = run(m, prompt, steps, 256, contiguous_blocks);
  std::printf("\n  block size  blocks used  logits vs block size 256 (one block)    max |logit - PyTorch|\n");
  for (int block_size : {1, 16, 256}) {
    int blocks = 0;
    const std::vector<float> logits = run(m, prompt, steps, block_size, blocks);
    size_t differ = 0;
    for (size_t i = 0; i < logits.size(); ++i)
      if (std::memcmp(&logits[i], &contiguous[i], sizeof(float)) != 0) ++differ;
    const float worst = max_abs_diff(logits, pytorch);
    const std::string same = block_size == 256 ? "(the reference: a contiguous cache)"
                             : differ == 0       ? "bit-identical: 0 of " + commas(int64_t(logits.size())) + " differ"
                                                 : commas(int64_t(differ)) + " of " + commas(int64_t(logits.size())) + " differ";
    std::printf("  %10d  %11d  %-38s  %s\n", block_size, blocks, same.c_str(), worst <= 1e-4f ? "<= 1e-4" : "> 1e-4 (!)");
  }
}

static void chapter() {
  part1_block_tables();
  part2_same_logits();
}

int main(int argc, char** argv) { return run_chapter(argc, argv, chapter); }
