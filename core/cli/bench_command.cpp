// kvscope bench: benchmarks that print tables (speed and memory belong here,
// never in timed tests). Each part is its own subcommand and file.
#include "cli/commands.h"

namespace kvscope::cli {

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that print a table: decode, attention, compaction (and gpu-* on a CUDA GPU)");
  bench->require_subcommand(1);
  add_bench_decode_command(*bench);
  add_bench_attention_command(*bench);
  add_bench_compaction_command(*bench);
  add_bench_gpu_attention_command(*bench);
  add_bench_gpu_compaction_command(*bench);
  add_bench_gpu_decode_command(*bench);
}

}  // namespace kvscope::cli
