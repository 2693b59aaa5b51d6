// The subcommands of the `kvscope` program, one file each.
// Each add_* registers its options on `app` and the function that runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "cli/option_values.h"  // number_check, kFileName
#include "model/backend.h"
#include "util/error.h"
#include "util/file.h"  // check_outputs_apart, NamedPath
#include "util/threads.h"  // kMaxThreads, check_thread_count

namespace kvscope::cli {

void add_generate_command(CLI::App& app);
void add_bench_command(CLI::App& app);  // `bench` and its parts:
void add_bench_decode_command(CLI::App& bench);
void add_bench_attention_command(CLI::App& bench);
void add_bench_compaction_command(CLI::App& bench);
void add_bench_gpu_attention_command(CLI::App& bench);  // the same questions on a CUDA GPU
void add_bench_gpu_compaction_command(CLI::App& bench);
void add_bench_gpu_decode_command(CLI::App& bench);
void add_devices_command(CLI::App& app);
void add_memory_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_heads_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_serve_bench_command(CLI::App& app);

// Option checks whose messages read as sentences ("--tokens: expects a number, not
// abc"); CLI11's own PositiveNumber prints its range up to 1.8e308.
extern const CLI::Validator kPositive;     // a number above 0
extern const CLI::Validator kNonNegative;  // a number, 0 or more
extern const CLI::Validator kFraction;     // a number from 0 to 1
extern const CLI::Validator kOpenFraction; // a number above 0 and below 1
extern const CLI::Validator kBlockSize;    // --block-size: 1 to kMaxBlockSize tokens

// A list option given the same value twice (--policies h2o,h2o, --keep 0.5,0.5):
// kvscope::Error "--policies: h2o is given twice", before a run that would do it twice.
template <class T>
void check_distinct(const std::vector<T>& values, const std::string& flag) {
  for (size_t i = 0; i < values.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (values[j] == values[i]) {
        if constexpr (std::is_arithmetic_v<T>) throw Error(flag + ": " + number_text(double(values[i])) + " is given twice");
        else throw Error(flag + ": " + values[i] + " is given twice");
      }
}

// Two --evict fractions that keep the same number of `tokens` (kept(f) of them) would
// run one row twice (0.5 and 0.499 of 64 both keep 32): kvscope::Error naming both.
template <class Kept>
void check_distinct_rows(const std::vector<double>& evict, int64_t tokens, Kept kept) {
  for (size_t i = 0; i < evict.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (kept(evict[j]) == kept(evict[i]))
        throw Error("--evict " + number_text(evict[j]) + " and " + number_text(evict[i]) + " both keep " +
                    std::to_string(kept(evict[i])) + " of the " + std::to_string(tokens) +
                    " tokens: the same row twice");
}

// The bundled model (assets/model): the default --model of every command that runs one.
std::string bundled_model_dir();
// Before a command reads `model_dir`: the bundled model, when its files are missing, is
// an error that says so; a folder the user gave gets check_model_folder's message.
void check_model_present(const std::string& model_dir);
// The held-out text of eval, heads and serve-bench: --text as given; else the model
// folder's heldout.txt when it has one; else the bundled model's.
std::string held_out_text(const std::string& text, const std::string& model_dir);
// TriAttention's calibration for generate, eval and serve-bench: --calibration as given;
// else the model folder's triattention-calibration.json when it has one; else "".
std::string calibration_file(const std::string& calibration, const std::string& model_dir);
// What a TriAttention calibration's provenance says about this run, as warnings: made
// with another model folder than `model_dir` (a checkpoint of the same shape loads
// without complaint, and its query centres are another model's), or, with
// `scored_text` given, made from that very text (eval would score TriAttention on text
// its query centres have seen). Recorded paths that are not there now say nothing.
void warn_of_calibration(const std::string& calibration, const std::string& model_dir,
                         const std::string& scored_text = "");
// eval's and heads' line when the text had fewer long-enough documents than --windows
// asked for: "(--windows 3 asked for more: only 1 document of the text is long enough)".
std::string fewer_windows_note(int asked, int found);

// --threads N: the OpenMP threads for matmuls and attention (0 = OpenMP's default:
// OMP_NUM_THREADS when set, else all cores; main checked it, check_openmp_default).
void set_threads(int threads);
// kvscope::Error when `threads` is over kMaxThreads; a warning on stderr when it is
// more than this machine's hardware threads (the extra ones take turns).
void check_threads(int threads);

// The calibration a run reads, named for check_outputs_apart: ("--calibration", the
// file given), or the model folder's own when none is (calibrate writes that one, so
// it is not among every model's inputs).
NamedPath calibration_read(const std::string& calibration, const std::string& model_dir);

// When a pool runs out: `write` writes the trace of the run up to the refused step to
// `path`. What to add to the refusal: " (the run up to that step: PATH)", or why the
// trace could not be written (the refusal is never lost to that second error).
std::string trace_of_the_refused_run(const std::string& path, const std::function<void()>& write);

// A path as output shows it: relative to the working directory when inside it
// (so the bundled model's files print the same on every checkout).
std::string shown_path(const std::string& path);

// Each line on stderr as "kvscope: warning: LINE" (e.g. Model::warnings).
void print_warnings(const std::vector<std::string>& warnings);

// --device cpu|cuda: the backend factory for an EngineConfig (empty for the CPU).
// kvscope::Error "--device cuda: no CUDA GPU found (...)" or "... this build has no
// CUDA backend ..." when the GPU cannot be used.
BackendFactory backend_for_device(const std::string& device);
// The first CUDA GPU's name ("CUDA GPU 0, NVIDIA H200"), after backend_for_device("cuda") succeeded.
std::string gpu_name();

}  // namespace kvscope::cli
