// kvscope: the command-line program.
//
//   kvscope generate --model DIR --prompt TEXT [-n N] [--chat] [--temperature T] ...
//   kvscope bench    [--config FILE] [--prompt-tokens N] [--decode-tokens N] ...
//   kvscope devices  the CPU threads and the CUDA GPUs this build can use
//   kvscope eval | heads | memory | simulate | calibrate | serve-bench   (kvscope --help lists them all)
//
// Every failure is one line on stderr, "kvscope: error: <file>: <problem>", and exit code 1.
// Input that is usable but suspicious (NaN weights, say) gives "kvscope: warning: ..." lines
// on stderr, and the run goes on.
#include <omp.h>

#include <cstdio>
#include <exception>
#include <filesystem>

#include "cli/commands.h"
#include "util/error.h"

namespace kvscope::cli {
void set_threads(int threads) {
  if (threads < 0) throw Error("--threads must be >= 0");
  if (threads > 0) omp_set_num_threads(threads);
}

std::string shown_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  const std::string prefix = cwd.string() + "/";
  return !ec && path.rfind(prefix, 0) == 0 ? path.substr(prefix.size()) : path;
}

void print_warnings(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) std::fprintf(stderr, "kvscope: warning: %s\n", w.c_str());
}
}  // namespace kvscope::cli

int main(int argc, char** argv) {
  CLI::App app{"kvscope: a Qwen3 decoder with a paged KV cache, eviction and compaction"};
  app.require_subcommand(1);
  kvscope::cli::add_generate_command(app);
  kvscope::cli::add_bench_command(app);
  kvscope::cli::add_devices_command(app);
  kvscope::cli::add_memory_command(app);
  kvscope::cli::add_calibrate_command(app);
  kvscope::cli::add_eval_command(app);
  kvscope::cli::add_heads_command(app);
  kvscope::cli::add_simulate_command(app);
  kvscope::cli::add_serve_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kvscope::Error& e) {
    std::fprintf(stderr, "kvscope: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kvscope: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvscope: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
