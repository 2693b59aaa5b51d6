// kvscope: the command-line program.
//
//   kvscope generate --model DIR --prompt TEXT [-n N] [--chat] [--temperature T] ...
//   kvscope bench    decode | attention | compaction (| gpu-*) [--config FILE] ...
//   kvscope devices  the CPU threads and the CUDA GPUs this build can use
//   kvscope eval | heads | memory | simulate | calibrate | serve-bench   (kvscope --help lists them all)
//
// Every failure is one line on stderr, "kvscope: error: <file>: <problem>", and exit code 1.
// Input that is usable but suspicious (NaN weights, say) gives "kvscope: warning: ..." lines
// on stderr, and the run goes on.
#include <fcntl.h>
#include <omp.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <string>

#include "cli/commands.h"
#include "cli/option_values.h"
#include "cli/parse_error.h"
#include "evict/triattention_calibration.h"
#include "model/config.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope::cli {

constexpr double kHuge = std::numeric_limits<double>::max();
const CLI::Validator kPositive = number_check(0, true, kHuge, "POSITIVE");
const CLI::Validator kNonNegative = number_check(0, false, kHuge, "NONNEGATIVE");
const CLI::Validator kFraction = number_check(0, false, 1, "FRACTION");
const CLI::Validator kOpenFraction = number_check(0, true, 1, "(0,1)", true);
const CLI::Validator kBlockSize = number_check(1, false, kMaxBlockSize, "1.." + std::to_string(kMaxBlockSize));

std::string bundled_model_dir() { return std::string(KVSCOPE_ASSETS_DIR) + "/model"; }

void check_model_present(const std::string& model_dir) {
  if (model_dir == bundled_model_dir() && !file_exists(model_dir + "/config.json"))
    throw Error("the bundled model is missing (" + model_dir + "/config.json); give --model DIR");
  check_model_folder(model_dir);
}

std::string held_out_text(const std::string& text, const std::string& model_dir) {
  if (!text.empty()) return text;
  const std::string folder_text = model_dir + "/heldout.txt";
  // Anything by that name is the model's (a directory is then refused as one), not
  // silently passed over for the bundled model's text.
  return path_exists(folder_text) ? folder_text : bundled_model_dir() + "/heldout.txt";
}

std::string calibration_file(const std::string& calibration, const std::string& model_dir) {
  if (!calibration.empty()) return calibration;
  const std::string folder_calibration = model_dir + "/triattention-calibration.json";
  return path_exists(folder_calibration) ? folder_calibration : "";
}

void warn_of_calibration(const std::string& calibration, const std::string& model_dir, const std::string& scored_text) {
  namespace fs = std::filesystem;
  const auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    return !a.empty() && !b.empty() && fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
  };
  const TriCalibration cal = TriCalibration::load(calibration);
  std::error_code ec;
  if (!cal.model.empty() && fs::exists(cal.model, ec) && !same(cal.model, model_dir))
    print_warnings({shown_path(calibration) + " was made with the model in " + cal.model + ", not this run's " +
                    shown_path(model_dir) + ": the same shape, so it loads, but its query centres are that model's"});
  if (same(cal.text, scored_text))
    print_warnings({shown_path(calibration) + " was made from " + shown_path(scored_text) +
                    ", the text this run scores: TriAttention's query centres have seen it"});
}

std::string fewer_windows_note(int asked, int found) {
  return "(--windows " + std::to_string(asked) + " asked for more: only " + plural(found, "document") +
         " of the text " + (found == 1 ? "is" : "are") + " long enough)";
}

void check_threads(int threads) {
  const std::string warning = check_thread_count(threads, "--threads " + std::to_string(threads));
  if (!warning.empty()) print_warnings({warning});
}

// Whether the command line gave --threads N with N > 0 (the number OpenMP starts then).
static bool threads_given(const CLI::App& app) {
  for (const CLI::App* command : app.get_subcommands()) {
    const CLI::Option* threads = command->get_option_no_throw("--threads");
    if (threads && threads->count() > 0 && threads->as<int>() != 0) return true;  // "00" and "+0" are 0 too
    if (threads_given(*command)) return true;
  }
  return false;
}

void set_threads(int threads) {
  if (threads < 0) throw Error("--threads must be 0 or more, not " + std::to_string(threads));
  if (threads == 0) return;
  check_threads(threads);
  omp_set_num_threads(threads);
}

NamedPath calibration_read(const std::string& calibration, const std::string& model_dir) {
  if (!calibration.empty() || model_dir.empty()) return {"--calibration", calibration};
  return {"the model's triattention-calibration.json", calibration_file("", model_dir)};
}

std::string trace_of_the_refused_run(const std::string& path, const std::function<void()>& write) {
  try {
    write();
  } catch (const Error& e) {
    return " (the trace of the run up to that step was not written: " + std::string(e.what()) + ")";
  }
  return " (the run up to that step: " + path + ")";
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

// A standard output the shell closed (>&-), reopened as /dev/null by main: it takes the
// output without a word, so output_written's exit code says it went nowhere.
static bool stdout_was_closed = false;

// The exit code once the run's output is written. Standard output has the tables and the
// text (or the help): if it could not take them (a full disk, say), the run did not do its
// job, and exit code 0 would hide that. Standard error has the summaries (generate's speeds
// and cache) and the warnings: where one was lost there is nowhere left to say so, but the
// exit code still can.
static int output_written() {
  if (stdout_was_closed) {
    std::fprintf(stderr, "kvscope: error: standard output: closed (>&-), so the output was thrown away\n");
    return 1;
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "kvscope: error: standard output: write failed (disk full?)\n");
    return 1;
  }
  return std::ferror(stderr) ? 1 : 0;
}

// For CLI11's "A subcommand is required": which command wanted one, the word given
// in its place (`kvscope frobnicate`, `kvscope bench decod`), and the choices.
static std::string missing_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  int next = 1;  // the argument after at's name
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands().front();
    while (next < argc && argv[next] != at->get_name()) ++next;
    ++next;
  }
  std::string message = next < argc && argv[next][0] != '-' ? "no command named " + std::string(argv[next])
                                                            : (at == &app ? "kvscope" : at->get_name()) + " needs a command";
  message += "; the commands:";
  for (const CLI::App* c : at->get_subcommands([](const CLI::App*) { return true; })) message += " " + c->get_name();
  return message;
}

}  // namespace kvscope::cli

int main(int argc, char** argv) {
  // A standard stream the shell closed (2>&-) reads as /dev/null: otherwise the next
  // file opened would take its number, and writes meant for it would land there.
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      if (open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd) return 1;
      kvscope::cli::stdout_was_closed = kvscope::cli::stdout_was_closed || fd == 1;
    }
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
  // Once the command line parsed (not for --help), before any command runs: OpenMP's
  // default, unless the command was given --threads N (N > 0), which replaces it.
  app.parse_complete_callback([&app] {
    if (kvscope::cli::threads_given(app)) return;
    const std::string warning = kvscope::check_openmp_default("lower it, unset it, or give --threads N");
    if (!warning.empty()) kvscope::cli::print_warnings({warning});
  });
  try {
    kvscope::cli::check_option_values(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help: print it, exit 0 once it is written
      app.exit(e);
      return kvscope::cli::output_written();
    }
    const bool no_command = std::string(e.what()).find("subcommand") != std::string::npos;
    const std::string what = no_command && !kvscope::cli::misspelt_option(e, app)
                                 ? kvscope::cli::missing_command(app, argc, argv)
                                 : kvscope::cli::parse_error_text(e, app);
    std::fprintf(stderr, "kvscope: error: %s (--help lists the options)\n", what.c_str());
    return 1;
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
  return kvscope::cli::output_written();
}
