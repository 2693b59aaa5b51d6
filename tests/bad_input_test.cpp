// Bad input to `kvscope` that is not a bad checkpoint (those are in
// checkpoint_errors_test.cpp): flags out of range in every command, a prompt or a
// text file that is not UTF-8, a KV pool too small for one block, and a pool that runs out
// mid-generation.
// Each is a one-line "kvscope: error: ..." on stderr and exit code 1, never a
// crash; the library gives the same message as a kvscope::Error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "cache/trace.h"
#include "model/config.h"
#include "model/weights.h"
#include "refused_run_trace.h"
#include "run_kvscope.h"
#include "util/error.h"
#include "util/file.h"
#include "util/memory_check.h"

namespace kvscope {
namespace {

struct ProgramRun {
  int code = -1;    // exit code, -1 when it did not exit normally (a crash)
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `kvscope ARGS` through the shell (so ARGS may hold $(printf ...)), its
// stderr kept apart in a file; `env` ("NAME=value ") goes before the program.
ProgramRun run_kvscope(const std::string& args, const std::string& env = "") {
  const std::string err_path = test::binary_path("bad_input_stderr_" + std::to_string(::getpid()));
  const test::ProgramRun run =
      test::run_shell(env + test::binary_path("kvscope") + " " + args + " 2>'" + err_path + "'");
  ProgramRun r{run.code, run.output, read_file(err_path)};
  std::remove(err_path.c_str());
  return r;
}

const std::string kTiny = "generate --model '" + test::tiny_model("tiny-tied") + "' --temperature 0 ";

// A fresh copy of the tiny checkpoint's folder, named `name` under the tests' temporary
// folder, for a test to spoil (never the fixture itself).
std::filesystem::path tiny_model_copy(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::copy(test::tiny_model("tiny-tied"), dir);
  return dir;
}

// Exit code 1 and exactly one line on stderr: "kvscope: error: " and a message holding `part`.
void expect_one_line_error(const std::string& args, const std::string& part) {
  const ProgramRun r = run_kvscope(args);
  EXPECT_EQ(r.code, 1) << args << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("kvscope: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
}

// Exit code 0 and no warning (a run that failed would have none either).
void expect_no_warning(const std::string& args) {
  const ProgramRun r = run_kvscope(args);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << args << "\n" << r.err;
}

TEST(BadInput, BlockSizeZeroOrOver256) {
  // Block size 0 used to reach a division by zero (SIGFPE) before any check.
  expect_one_line_error(kTiny + "--prompt hi --block-size 0", "--block-size: must be 1 or more, not 0");
  expect_one_line_error(kTiny + "--prompt hi --block-size 257", "--block-size: must be 256 or less, not 257");
  expect_one_line_error(kTiny + "--prompt hi --block-size -4", "not -4");
}

TEST(BadInput, UsageErrorsAreOneLineToo) {
  // Mistyped commands and option values get the same one line and exit code 1 as
  // bad files, not CLI11's own exit codes (105, 106) or its ranges up to 1.8e308.
  expect_one_line_error(kTiny + "--prompt hi -n abc", "--tokens: expects a whole number, not abc");
  // A whole-number option given something else (once "Could not convert: --tokens = 1.5"),
  // or too large a number (once read as 9223372036854775807 without a word).
  expect_one_line_error(kTiny + "--prompt hi -n 1.5", "--tokens: expects a whole number, not 1.5 (");
  expect_one_line_error(kTiny + "--prompt hi -n 1e3", "--tokens: expects a whole number, not 1e3 (");
  expect_one_line_error(kTiny + "--prompt hi -n1.5", "--tokens: expects a whole number, not 1.5 (");  // attached
  expect_one_line_error("calibrate --chunk abc --model m --text t --out o", "--chunk: expects a whole number, not abc (");
  expect_one_line_error("simulate --tokens 99999999999999999999",
                        "--tokens: 99999999999999999999 is out of range (the most is 9223372036854775807) (");
  expect_one_line_error("eval --seed 3 --policies h2o", "--seed is for the random policy, and --policies leaves it out");
  // simulate's streaming policy on the uniform workload: five "seeds" were five copies of one run.
  expect_one_line_error("simulate --policy streaming --seeds 5", "--seed, --seeds: nothing in a run of the streaming");
  expect_one_line_error("simulate --policy streaming --seed 2", "every seed gives the same run");
  // An unsigned 64-bit seed takes all of its range: 2^63 was once refused as past 2^63 - 1.
  expect_one_line_error("simulate --seed 18446744073709551616",  // once "out of range", no range given
                        "--seed: 18446744073709551616 is out of range (the most is 18446744073709551615) (");
  EXPECT_EQ(run_kvscope("simulate --tokens 100 --seed 18446744073709551615").code, 0);
  expect_one_line_error("simulate --seeds 2 --seed 18446744073709551615",
                        "the seeds would run past 18446744073709551615");
  // A number is the whole value: " 0.5" was read as 0.5, "0.5 " refused.
  expect_one_line_error(kTiny + "--prompt hi --temperature ' 0.5'", "--temperature: expects a number, not \" 0.5\" (");
  expect_one_line_error(kTiny + "--prompt hi -n ' 5'", "--tokens: expects a whole number, not \" 5\" (");
  expect_one_line_error(kTiny + "--prompt hi -n '5 '", "--tokens: expects a whole number, not \"5 \" (");
  expect_one_line_error("eval --keep '0.5, 0.25'", "--keep: expects a number, not \" 0.25\" (");
  // A negative unsigned one is its check's: "must be 0 or more" (once "the least is -9223372036854775808").
  expect_one_line_error("simulate --seed -18446744073709551616",
                        "--seed: must be 0 or more, not -18446744073709551616");
  expect_one_line_error(kTiny + "--prompt hi -n 99999999999", "--tokens: 99999999999 is out of range (");
  expect_one_line_error("eval --keep 0.5,abc", "--keep: expects a number, not abc (");
  // A list's later words ("--keep 0.1 abc"): once "Could not convert: --keep = 0.1,abc".
  expect_one_line_error("eval --keep 0.5 abc", "--keep: expects a number, not abc (");
  expect_one_line_error("eval --keep 0.5 0.25, --windows 1", "--keep: an empty item in the list \"0.25,\"");
  expect_one_line_error("calibrate --chunk --out o", "--chunk: expects a whole number, but the next word is the option --out");
  expect_one_line_error("simulate --tokens", "--tokens: no value given (");
  // A text value left out: once the option was taken as the text ("--seed" as the
  // prompt), then "The following argument was not expected: 3".
  expect_one_line_error(kTiny + "--prompt --seed 3", "--prompt: no value given: the next word is the option --seed (");
  expect_one_line_error("simulate --policy --budget 5", "--policy: no value given: the next word is the option --budget (");
  // Nothing after the '=': CLI11 took the next word as the value, even an option: a prompt
  // "--chat", a trace file named "./--sinks" (exit 0 both).
  expect_one_line_error(kTiny + "-n 2 --prompt= --chat", "--prompt: no value after the '=' (");
  expect_one_line_error("simulate --tokens 100 --strategy compact --trace= --sinks", "--trace: no value after the '=' (");
  // An empty file to write: once "no output" and exit 0, having written nothing.
  for (const std::string& empty : {kTiny + "--prompt hi -n 2 --trace ''", std::string("eval --json ''"),
                                   std::string("simulate --tokens 100 --strategy compact --trace ''"),
                                   std::string("serve-bench --json ''"), std::string("calibrate --model m --text t --out ''")})
    expect_one_line_error(empty, ": an empty file name (");
  // And an empty file to read: "--text ''" ran eval on the default text, and "--config ''"
  // said ": cannot open", naming no file.
  for (const std::string& empty : {std::string("eval --text ''"), std::string("memory --config ''"),
                                   std::string("simulate --config ''"), std::string("bench decode --config ''"),
                                   kTiny + "--prompt hi --budget 40 --policy triattention --calibration ''",
                                   std::string("serve-bench --config ''"),
                                   std::string("serve-bench --policy triattention --calibration ''")})
    expect_one_line_error(empty, ": an empty file name (");
  expect_one_line_error(kTiny + "--prompt hi -n -3", "--tokens: must be 0 or more, not -3");
  expect_one_line_error("bench gpu-decode --decode-tokens 0", "--decode-tokens: must be above 0, not 0");
  expect_one_line_error(kTiny + "--prompt hi --policy lru", "--policy: lru not in {streaming,h2o,");
  expect_one_line_error(kTiny + "--prompt hi --bogus", "--bogus");
  // A misspelt option where a required one is missing: once "--prompt is required" of
  // a prompt that was typed, and "kvscope needs a command" of --version.
  expect_one_line_error(kTiny + "--promt hi", "The following arguments were not expected: --promt hi (");
  expect_one_line_error("--version", "The following argument was not expected: --version (");
  expect_one_line_error("bench --sizee 3", "The following arguments were not expected: --sizee 3 (");
  // ...but a misspelt command before its options is still named as a command.
  expect_one_line_error("generat --prompt hi", "no command named generat; the commands: generate bench");
  expect_one_line_error("bench atention --seq 5", "no command named atention; the commands: decode attention");
  expect_one_line_error("frobnicate", "no command named frobnicate; the commands: generate bench devices");
  expect_one_line_error("bench decod", "no command named decod; the commands: decode attention compaction");
  expect_one_line_error("bench", "bench needs a command; the commands: decode");
  expect_one_line_error("", "kvscope needs a command; the commands: generate");
  // An option of one value given twice: once CLI11's "At Most 1 required but received 2".
  expect_one_line_error("simulate --tokens 5 --tokens 6", "--tokens: given 2 times; it takes one value");
  expect_one_line_error(kTiny + "--prompt a --prompt b", "--prompt: given 2 times; it takes one value");
  // Arguments no option takes, as typed: once CLI11's "were not expected: 100 --tokns" (last first).
  expect_one_line_error("simulate --tokns 100", "The following arguments were not expected: --tokns 100 (");
  expect_one_line_error("simulate --tokens 64 one two", "The following arguments were not expected: one two (");
  const ProgramRun help = run_kvscope("generate --help");
  EXPECT_EQ(help.code, 0) << help.err;
  EXPECT_NE(help.out.find("--tokens"), std::string::npos) << help.out;
}

TEST(BadInput, NumbersOutOfRangeInEveryCommand) {
  // Each of these once crashed (a division by a zero block size, a memcpy check
  // reading past an empty buffer, a probe array of -1 GiB) or ran with a value other
  // than the one given (a negative --sinks or a zero --budget taken as "not given").
  expect_one_line_error("eval --windows 1 --context 64 --block-size 0",
                        "--block-size: must be 1 or more, not 0");
  expect_one_line_error("eval --windows 1 --context 64 --keep 0", "--keep: must be above 0, not 0");
  expect_one_line_error("eval --windows 1 --context 64 --keep 0.5,1", "--keep: must be below 1, not 1");
  // Once "forward: position 512 is past ..." from inside the first window.
  expect_one_line_error("heads --model '" + test::tiny_model("tiny-tied") + "' --length 600",
                        "heads: --length 600 is longer than the model's max_position_embeddings (512)");
  // A budget whose first round never comes: the row was the full cache's under another name.
  expect_one_line_error("eval --windows 1 --context 64 --keep 0.9",
                        "eval: keeping 0.9 of the 64-token context is 58 tokens, and a round starts at 58 + 16 (--slack) "
                        "= 74 live tokens, not before the context ends: no scored prediction would follow an eviction; "
                        "lower --keep or --slack, or raise --context");
  // eval's budgets come from --keep x --context: the message says so, not "budget 6".
  expect_one_line_error("eval --windows 1 --context 64",
                        "eval: keeping 0.1 of the 64-token context is 6 tokens, fewer than the protected 4 sinks + 32 "
                        "recent: raise --keep or --context, or lower --sinks and --recent");
  expect_one_line_error("eval --windows 1 --context 12",
                        "eval: keeping 0.1 of the 12-token context is 1 token, fewer than the protected 4 sinks + 32 "
                        "recent: raise --keep or --context, or lower --sinks and --recent");
  expect_one_line_error("bench compaction --evict nan", "--evict: expects a number, not nan");
  expect_one_line_error("bench compaction --evict 1.5", "--evict: must be 1 or less, not 1.5");
  // Once CLI11's "Value 300 not in range 1 to 256".
  expect_one_line_error("bench compaction --block-sizes 16,300", "--block-sizes: must be 256 or less, not 300 (");
  expect_one_line_error("bench gpu-compaction --block-size 0", "--block-size: must be 1 or more, not 0 (");
  // --help said INT:NONNEGATIVE, and 0 was then refused by every evicting strategy.
  expect_one_line_error("serve-bench --budget 0", "--budget: must be above 0, not 0 (");
  expect_one_line_error("bench gpu-decode --sequences 2000", "--sequences: must be 1024 or less, not 2000 (");
  expect_one_line_error("bench compaction --tokens inf", "--tokens: expects a whole number, not inf");
  // A value left out: the parser would take the next option as the value.
  expect_one_line_error("bench compaction --tokens --evict 0.5",
                        "--tokens: expects a whole number, but the next word is the option --evict");
  expect_one_line_error("bench compaction --tokens ''", "--tokens: expects a whole number, not an empty value");
  // Empty items of a comma list, which the parser would drop without a word.
  expect_one_line_error("bench compaction --evict 0.5,,0.25",
                        "--evict: an empty item in the list \"0.5,,0.25\" (items are separated by one comma)");
  expect_one_line_error("bench compaction --evict , --repeats 1",
                        "--evict: an empty item in the list \",\" (items are separated by one comma)");
  expect_one_line_error("eval --keep=0.5,", "--keep: an empty item in the list \"0.5,\"");
  expect_one_line_error("bench attention --contexts ''", "--contexts: an empty list");
  // Commas in a value that is not a list are the user's text.
  const ProgramRun commas_in_a_prompt = run_kvscope("generate --prompt ',,' -n 1");
  EXPECT_EQ(commas_in_a_prompt.code, 0) << commas_in_a_prompt.err;
  expect_one_line_error("bench decode --bandwidth-gib -1", "--bandwidth-gib must be from 0.001 to ");
  // Counts below their least value, in the words of every other range check (once
  // "--seeds must be >= 1", without the value given).
  expect_one_line_error("simulate --seeds 0", "--seeds: must be above 0, not 0 (");
  expect_one_line_error("heads --windows 0", "--windows: must be above 0, not 0 (");
  expect_one_line_error("eval --windows -1", "--windows: must be 0 or more, not -1 (");
  expect_one_line_error("calibrate --max-tokens -1 --model m --text t --out o", "--max-tokens: must be 0 or more, not -1 (");
  expect_one_line_error("serve-bench --config c --layers -1", "--layers: must be 0 or more, not -1 (");
  expect_one_line_error("bench decode --decode-tokens 0", "--decode-tokens: must be above 0, not 0 (");
  expect_one_line_error(kTiny + "--prompt hi --threads -2", "--threads: must be 0 or more, not -2 (");
  expect_one_line_error("simulate --budget 0", "--budget: must be above 0, not 0");
  expect_one_line_error("simulate --sinks -5", "--sinks: must be 0 or more, not -5");
  expect_one_line_error("heads --recent -1", "--recent: must be 0 or more, not -1");
  // The schedule names the value that is out of range (once "budget, sinks and recent must be >= 0, slack >= 1").
  expect_one_line_error("eval --slack 0", "--slack: must be above 0, not 0");
  expect_one_line_error("serve-bench --recent -3", "--recent: must be 0 or more, not -3");
  expect_one_line_error("serve-bench --budget 64 --slack 0", "--slack: must be above 0, not 0");
  // budget + slack overflowed an int: "prunes to 100 whenever -2147483549 are live", and a round every token.
  expect_one_line_error("simulate --budget 100 --slack 2147483647",
                        "--slack must be from 1 to 536870912 (2^29), got 2147483647");
  expect_one_line_error("simulate --budget 2147483647", "--budget must be from 0 to 536870912 (2^29), got 2147483647");
  // 16,000 tokens x this many bytes overflowed an int64: "bytes reclaimed -1.92 kB".
  expect_one_line_error("simulate --bytes-per-token 9223372036854775807",
                        "--bytes-per-token must be in [1, 2^30], got 9223372036854775807");
  expect_one_line_error("heads --from 600 --length 512",  // with the range, before the model loads
                        "heads: the first measured query (--from 600) must be in [sinks + recent + 10, window length) = [46, 512)");
  // No middle key, or one: "heavy" read 0% (or 100%) for every head.
  expect_one_line_error("heads --windows 1 --length 64 --from 36",
                        "heads: the first measured query (--from 36) must be in [sinks + recent + 10, window length) = "
                        "[46, 64), so that 10 middle keys or more are measured");
  // Sums near INT_MAX, taken in 64 bits: heads crashed (SIGSEGV) and eval said "vector::_M_default_append".
  expect_one_line_error("heads --sinks 2147483647 --recent 2147483647",
                        "heads: sinks + recent (2147483647 + 2147483647) must be fewer than the window's tokens");
  expect_one_line_error("eval --context 2147483647",
                        "eval: --context 2147483647 + --continuation 32 need 2147483679 positions (the oracle feeds "
                        "every greedy token), more than the model's max_position_embeddings (2048): lower --context or "
                        "--continuation");
  // Its bytes did not fit a size_t: "a KV memory budget of 0 bytes".
  expect_one_line_error(kTiny + "--prompt hi --kv-memory 1e300", "--kv-memory: must be 1000000000 or less, not 1e300");
  // Under the smallest double: strtod read 0, and the run went on with a whole-sequence
  // pool (0.001 is refused as less than a block); --temperature 1e-400 decoded greedily.
  expect_one_line_error(kTiny + "--prompt hi --kv-memory 1e-400", "--kv-memory: 1e-400 is too close to 0 to be told from it");
  expect_one_line_error(kTiny + "--prompt hi --temperature 1e-320", "--temperature: 1e-320 is too close to 0");
  // prompt + new overflowed an int, and a pool of 134 million blocks was allocated.
  expect_one_line_error(kTiny + "--prompt hi -n 2147483647",
                        "generate: 2 prompt + 2147483647 new tokens need 2147483648 positions (the last new token "
                        "is never fed), more than the model's max_position_embeddings (512)");
  // Too many positions and too small a pool: the positions are named first. Once the
  // pool's "raise --kv-memory" came first, and following it led to this error.
  expect_one_line_error(kTiny + "--prompt hi -n 600 --kv-memory 0.01",
                        "generate: 2 prompt + 600 new tokens need 601 positions (the last new token is never fed), "
                        "more than the model's max_position_embeddings (512)");
  // A window no longer than sinks + recent has no other keys to measure ("[36, 0)" before).
  expect_one_line_error("heads --length 0", "heads: sinks + recent (4 + 32) must be fewer than the window's tokens (--length 0)");
  expect_one_line_error("heads --sinks 600", "heads: sinks + recent (600 + 32) must be fewer than the window's tokens (--length 512)");
  expect_one_line_error(kTiny + "--prompt hi --seed -1", "--seed: must be 0 or more, not -1");  // not 2^64 - 1
}

TEST(BadInput, AListGivenTheSameValueTwiceIsRefused) {
  // These ran the same policy, budget or strategy twice (minutes, for eval) and printed twin rows.
  expect_one_line_error("eval --policies streaming,h2o,streaming", "--policies: streaming is given twice");
  // bench compaction's the same way: 0.5 and 0.499 of 64 tokens printed one row twice.
  expect_one_line_error("bench compaction --tokens 64 --evict 0.5,0.499",
                        "--evict 0.5 and 0.499 both keep 32 of the 64 tokens: the same row twice");
  // Two fractions of one budget: two rows "50.0% (128)" and "50.1% (128)", the same run.
  expect_one_line_error("eval --context 256 --keep 0.5,0.501 --policies streaming --windows 1 --continuation 4",
                        "eval: --keep 0.5 and 0.501 of the 256-token context are both 128 tokens: the same row twice");
  expect_one_line_error("eval --keep 0.5,0.25,0.5", "--keep: 0.5 is given twice");
  expect_one_line_error("serve-bench --strategies holes,holes", "--strategies: holes is given twice");
  expect_one_line_error("bench compaction --evict 0.5,0.5", "--evict: 0.5 is given twice");
  expect_one_line_error("bench decode --weights bf16,bf16", "--weights: bf16 is given twice");
}

TEST(BadInput, SamplingFlagsAreCheckedBeforeAnythingIsPrinted) {
  const std::string sampled = "generate --model '" + test::tiny_model("tiny-tied") + "' --prompt hi ";
  expect_one_line_error(sampled + "--temperature -1", "--temperature: must be 0 or more, not -1 (");
  expect_one_line_error(sampled + "--temperature inf", "--temperature: expects a number, not inf (");  // as parsed
  expect_one_line_error(sampled + "--top-k -2", "--top-k: must be 0 or more, not -2 (");
  expect_one_line_error(sampled + "--top-p 2", "--top-p: must be 1 or less, not 2 (");
  EXPECT_EQ(run_kvscope(sampled + "--top-p 0").out, "") << "the prompt was printed before the error";
  // Above 0 is above 0, even where a float would round it to 0 (refused as "got 0" once):
  // the nucleus is then the most likely token alone, the greedy text.
  const ProgramRun tiny_p = run_kvscope(sampled + "-n 8 --top-p 1e-46");
  EXPECT_EQ(tiny_p.code, 0) << tiny_p.err;
  EXPECT_EQ(tiny_p.out, run_kvscope(sampled + "-n 8 --temperature 0").out);
}

TEST(BadInput, CompactionBenchWithNothingToMoveSaysSo) {
  // Evicting nothing, or everything, leaves no survivor to slide: a row that says so.
  const ProgramRun r = run_kvscope("bench compaction --tokens 64 --evict 0,1 --repeats 1");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("| 16 | 0.0% | 0 | 0 MB | nothing to move |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 16 | 100.0% | 0 | 0 MB | nothing to move |"), std::string::npos) << r.out;
  // The column says what was evicted: 99% of 64 tokens keeps none of them.
  const ProgramRun all = run_kvscope("bench compaction --tokens 64 --evict 0.99 --repeats 1");
  EXPECT_NE(all.out.find("| 16 | 100.0% | 0 | 0 MB | nothing to move |"), std::string::npos) << all.out;
}

TEST(BadInput, AnOutputThatCannotBeWrittenIsRefusedBeforeTheRun) {
  // Each of these once ran to the end (minutes, for eval) and only then failed to write.
  const std::string nowhere = "/nonexistent-kvscope-dir/out";
  expect_one_line_error("eval --windows 1 --context 64 --json " + nowhere, nowhere + ": cannot write: No such file");
  expect_one_line_error("simulate --strategy holes --trace " + nowhere, nowhere + ": cannot write: No such file");
  expect_one_line_error("serve-bench --requests 2 --trace " + nowhere, nowhere + ": cannot write: No such file");
  expect_one_line_error("serve-bench --requests 1048577 --trace " + nowhere,
                        "--trace: a trace holds at most 1048576 sequences, and each of the 1048577 requests is one "
                        "(each preemption one more): lower --requests");
  expect_one_line_error(kTiny + "--prompt hi --trace " + nowhere, nowhere + ": cannot write: No such file");
  expect_one_line_error("simulate --strategy holes --trace /tmp", "/tmp: is a directory, not a file");
  const ProgramRun r = run_kvscope("simulate --strategy holes --trace " + nowhere);
  EXPECT_EQ(r.out, "") << "the run went ahead";
}

// Standard output that cannot take the table (/dev/full: every write fails as on a
// full disk) is an error, not exit code 0 with the table lost.
TEST(BadInput, StandardOutputThatCannotBeWrittenIsAnError) {
  for (const std::string& command :
       {std::string("simulate --tokens 100"), "memory --config '" + test::source_path("assets/model/config.json") + "'",
        std::string("--help"), std::string("simulate --help")}) {
    const test::ProgramRun r = test::run_shell(test::binary_path("kvscope") + " " + command + " 2>&1 >/dev/full");
    EXPECT_EQ(r.code, 1) << command << ": " << r.output;
    EXPECT_EQ(r.output, "kvscope: error: standard output: write failed (disk full?)\n") << command;
  }
  for (const char* args : {"", " --help"}) {
    const test::ProgramRun chapter =
        test::run_shell(test::binary_path("tutorials/01-the-cache-only-grows") + args + " 2>&1 >/dev/full");
    EXPECT_EQ(chapter.code, 1) << args << ": " << chapter.output;
    EXPECT_EQ(chapter.output, "01-the-cache-only-grows: error: standard output: write failed (disk full?)\n") << args;
  }
}

// Standard error that cannot take generate's summary (its speeds and cache) or a warning:
// the text still reaches standard output, and the exit code says what was lost.
TEST(BadInput, StandardErrorThatCannotBeWrittenIsNotExitCodeZero) {
  const std::string generate = test::binary_path("kvscope") + " " + kTiny + "--prompt hi -n 2";
  const test::ProgramRun lost = test::run_shell(generate + " 2>/dev/full");
  EXPECT_EQ(lost.code, 1) << lost.output;
  EXPECT_NE(lost.output, "") << "the generated text went missing too";
  const test::ProgramRun kept = test::run_shell(generate + " 2>/dev/null");
  EXPECT_EQ(kept.code, 0) << kept.output;
  EXPECT_EQ(kept.output, lost.output);
  // Standard error closed by the shell is discarded as 2>/dev/null would (it once
  // made every generate exit 1).
  EXPECT_EQ(test::run_shell(generate + " 2>&-").code, 0);
  // Standard output closed is output thrown away: said, and exit code 1 (it was 0).
  const test::ProgramRun closed = test::run_shell(generate + " 2>&1 >&-");
  EXPECT_EQ(closed.code, 1) << closed.output;
  EXPECT_NE(closed.output.find("kvscope: error: standard output: closed (>&-), so the output was thrown away\n"),
            std::string::npos) << closed.output;
  // A command that writes nothing there is not refused for it (OMP_NUM_THREADS unset:
  // above the cores it is a warning, which would go there).
  EXPECT_EQ(test::run_shell("env -u OMP_NUM_THREADS " + test::binary_path("kvscope") +
                            " simulate --tokens 100 2>/dev/full >/dev/null").code, 0);
}

// A value the run cannot use is named by its flag (the README's "kvscope: error:
// <file or flag>: <problem>"), also where the check lives below the command line.
TEST(BadInput, ErrorsNameTheirFlag) {
  expect_one_line_error(kTiny + "--prompt ''", "kvscope: error: --prompt: the prompt is empty");
  expect_one_line_error("simulate --tokens 2000000000", "kvscope: error: --tokens must be in [1, 2^30], got 2000000000");
  expect_one_line_error("simulate --policy h2o", "kvscope: error: --policy h2o: it scores tokens from a model's");
  expect_one_line_error("simulate --policy lru", "kvscope: error: --policy: unknown policy \"lru\" for simulate");
  expect_one_line_error("simulate --workload zipf", "kvscope: error: --workload: unknown workload \"zipf\"");
  expect_one_line_error("simulate --budget 100 --slack 0", "kvscope: error: --slack must be from 1 to 536870912");
  const std::string tiny = "--model '" + test::tiny_model("tiny-tied") + "' ";
  expect_one_line_error("eval " + tiny + "--context 1", "kvscope: error: eval: --context must be at least 2 tokens, got 1");
  expect_one_line_error("eval " + tiny + "--continuation 0",
                        "kvscope: error: eval: --continuation must be at least 1 token, got 0");
  expect_one_line_error("calibrate " + tiny + "--text '" + test::source_path("README.md") + "' --out '" + testing::TempDir() +
                            "never-written.json' --chunk 513",
                        "kvscope: error: calibrate: --chunk 513 is outside [1, max_position_embeddings = 512]");
}

TEST(BadInput, BudgetSmallerThanTheProtectedWindow) {
  expect_one_line_error(kTiny + "--prompt hi --budget 20 --sinks 4 --recent 32",
                        "--budget 20 is smaller than the protected tokens (--sinks 4 + --recent 32)");
}

TEST(BadInput, EvictionFlagsWithoutABudgetAreRefused) {
  // generate evicts only with --budget; its eviction flags without one used to run
  // the whole generation with nothing evicted ("cache: no eviction" at the end).
  for (const std::string flag : {"--policy snapkv", "--strategy holes", "--sinks 2", "--recent 8", "--slack 16",
                                 "--calibration x.json"}) {
    const std::string name = flag.substr(0, flag.find(' '));
    expect_one_line_error(kTiny + "--prompt hi " + flag, name + " requires --budget");
    // --budget 0 is "no eviction": the flag would go unused just the same.
    expect_one_line_error(kTiny + "--prompt hi --budget 0 " + flag,
                          name + " needs a budget above 0: --budget 0 means no eviction");
  }
}

TEST(BadInput, ABudgetBelowSnapKVsWindowIsRefused) {
  const std::string flags = "--budget 20 --slack 1 --sinks 0 --recent 0 --policy snapkv";
  const std::string want = "eviction budget 20 leaves nothing beyond the tokens snapkv protects (0 sinks + its "
                           "observation window, the newest 32): its votes would never choose a token";
  expect_one_line_error(kTiny + "--prompt hi " + flags, want);
  expect_one_line_error("serve-bench --model '" + test::tiny_model("tiny-tied") + "' " + flags, want);
  expect_one_line_error("eval --model '" + test::tiny_model("tiny-tied") +
                            "' --policies snapkv --context 200 --keep 0.1 --sinks 0 --recent 0",
                        "eviction budget 20 leaves nothing beyond the tokens snapkv protects");
}

// A calibration of another checkpoint of the same shape loads without complaint, and
// one made from the text eval scores has seen it: both are said, and the run goes on.
TEST(BadInput, ACalibrationOfAnotherModelOrOfTheScoredTextIsAWarning) {
  const std::string tied = test::tiny_model("tiny-tied"), untied = test::tiny_model("tiny-untied");
  const std::string text = test::source_path("README.md"), out = test::binary_path("calibration_of_tied.json");
  ASSERT_EQ(run_kvscope("calibrate --model '" + tied + "' --text '" + text + "' --max-tokens 200 --out '" + out + "'")
                .code, 0);
  const std::string evict =
      " --budget 16 --slack 4 --sinks 1 --recent 4 --policy triattention --calibration '" + out + "'";
  const ProgramRun other = run_kvscope("generate --model '" + untied + "' --prompt hi -n 30 --temperature 0" + evict);
  EXPECT_EQ(other.code, 0) << other.err;
  // (This run's model folder as shown_path prints it: relative to the working folder.)
  EXPECT_NE(other.err.find("calibration_of_tied.json was made with the model in " + tied + ", not this run's "),
            std::string::npos) << other.err;
  EXPECT_NE(other.err.find("tiny-untied: the same shape, so it loads, but its query centres are that model's\n"),
            std::string::npos) << other.err;
  const ProgramRun own = run_kvscope("generate --model '" + tied + "' --prompt hi -n 30 --temperature 0" + evict);
  EXPECT_EQ(own.code, 0) << own.err;
  EXPECT_EQ(own.err.find("warning"), std::string::npos) << own.err;
  const ProgramRun seen = run_kvscope("eval --model '" + tied + "' --text '" + text + "' --calibration '" + out +
                                      "' --policies triattention --context 64 --keep 0.5 --windows 1 --sinks 1 "
                                      "--recent 4 --continuation 4 --threads 1");
  EXPECT_EQ(seen.code, 0) << seen.err;
  EXPECT_NE(seen.err.find("README.md, the text this run scores: TriAttention's query centres have seen it\n"),
            std::string::npos) << seen.err;
}

TEST(BadInput, CalibrationForAnotherPolicyIsRefused) {
  // Only TriAttention reads a calibration; with another policy it went unused.
  const std::string tiny = "--model '" + test::tiny_model("tiny-tied") + "' --calibration x.json ";
  expect_one_line_error(kTiny + "--prompt hi --budget 48 --calibration x.json",
                        "--calibration is for --policy triattention, not h2o");
  expect_one_line_error("serve-bench " + tiny + "--policy snapkv", "--calibration is for --policy triattention, not snapkv");
  expect_one_line_error("eval " + tiny + "--policies h2o,random",
                        "--calibration is for the triattention policy, and --policies leaves it out");
}

TEST(BadInput, ChatWithAModelThatHasNoChatTokens) {
  // The bundled model's tokenizer has no <|im_start|>: --chat once wrapped the prompt in
  // markers that were then read as plain text, without a word.
  expect_one_line_error("generate --prompt hi --chat",
                        "assets/model/tokenizer.json has no <|im_start|> and <|im_end|> tokens: the model was not "
                        "trained on ChatML (drop --chat)");
  // Markers that are vocabulary entries, not added tokens: encode() splits them into
  // pieces, so they are plain text to the model just the same (token_id() found them).
  namespace fs = std::filesystem;
  const fs::path dir = tiny_model_copy("kvscope-chatml-in-vocab");
  nlohmann::json tok = nlohmann::json::parse(read_file((dir / "tokenizer.json").string()));
  nlohmann::json added = nlohmann::json::array();
  for (const nlohmann::json& t : tok["added_tokens"])
    if (t["content"] == "<|im_start|>" || t["content"] == "<|im_end|>")
      tok["model"]["vocab"][t["content"].get<std::string>()] = t["id"];
    else
      added.push_back(t);
  tok["added_tokens"] = added;
  std::ofstream((dir / "tokenizer.json").string()) << tok.dump();
  expect_one_line_error("generate --model '" + dir.string() + "' --prompt hi --chat -n 2",
                        "has no <|im_start|> and <|im_end|> tokens: the model was not trained on ChatML");
  EXPECT_EQ(run_kvscope(kTiny + "--prompt hi --chat -n 2").code, 0);  // the fixture's are added tokens
  fs::remove_all(dir);
}

// The offset is in --prompt; with --chat it was in the ChatML text around it (17 more).
TEST(BadInput, PromptThatIsNotUtf8) {
  expect_one_line_error(kTiny + "--prompt \"$(printf 'ok \\377')\"", "prompt is not valid UTF-8 (byte offset 3)");
  expect_one_line_error(kTiny + "--chat --prompt \"$(printf 'ok \\377')\"",
                        "prompt is not valid UTF-8 (byte offset 3)");
}

// A tokenizer.json with ids past the model's embedding (another model's): said before
// the weights load, naming the tokenizer (once "forward: token id 500 is outside the
// vocabulary [0, 384)", after loading them). The weights here are cut short: unread.
TEST(BadInput, APromptTokenPastTheEmbeddingIsSaidBeforeTheWeightsLoad) {
  namespace fs = std::filesystem;
  const fs::path dir = tiny_model_copy("kvscope-tokenizer-past-embedding");
  nlohmann::json tok = nlohmann::json::parse(read_file((dir / "tokenizer.json").string()));
  tok["added_tokens"].push_back({{"id", 500}, {"content", "<|x|>"}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", false}});
  std::ofstream((dir / "tokenizer.json").string()) << tok.dump();
  fs::resize_file(dir / "model.safetensors", 100);
  expect_one_line_error("generate --model '" + dir.string() + "' --prompt 'a<|x|>' -n 2",
                        "kvscope-tokenizer-past-embedding/tokenizer.json gives the prompt token 500, and the model's "
                        "embedding has 384 rows (vocab_size in config.json): the tokenizer is another model's");
  fs::remove_all(dir);
}

// eval's default policies include TriAttention: on a model folder without a
// calibration the way out is said (once "...triattention-calibration.json: cannot open").
TEST(BadInput, EvalOnAModelWithoutACalibrationSaysWhatToDo) {
  expect_one_line_error("eval --model '" + test::tiny_model("tiny-tied") + "' --context 64 --keep 0.7",
                        "eval: policy triattention needs a calibration file: make one with kvscope calibrate and give "
                        "--calibration, or leave triattention out of --policies");
}

TEST(BadInput, TextFileThatIsNotUtf8NamesTheFile) {
  // Once "prompt is not valid UTF-8", naming neither the file nor the option.
  const std::string text = test::binary_path("not_utf8_" + std::to_string(::getpid()) + ".txt");
  std::FILE* f = std::fopen(text.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs("A line of text,\nthen a byte that is no character: \xFF.\n", f);
  std::fclose(f);
  const std::string expected = text + ": not valid UTF-8 (byte offset 50): a text file is expected";
  const std::string tiny = " --model '" + test::tiny_model("tiny-tied") + "'";
  expect_one_line_error("eval" + tiny + " --context 64 --keep 0.7 --policies h2o --text " + text, expected);
  expect_one_line_error("heads" + tiny + " --text " + text, expected);
  expect_one_line_error("calibrate" + tiny + " --text " + text + " --out " + test::binary_path("never.json"), expected);
  expect_one_line_error("serve-bench" + tiny + " --requests 2 --text " + text, expected);
  std::remove(text.c_str());
}

TEST(BadInput, ADirectoryGivenForAFileIsNamed) {
  // A directory opens for reading and reads as empty: once "holds no text", "the
  // text is empty", "not valid JSON" or "bad magic", never saying it was a directory.
  const std::string dir = test::binary_path("a_directory_" + std::to_string(::getpid()));
  std::filesystem::create_directory(dir);
  const std::string expected = dir + ": is a directory, not a file";
  const std::string tiny = " --model '" + test::tiny_model("tiny-tied") + "'";
  expect_one_line_error("eval" + tiny + " --context 64 --keep 0.7 --policies h2o --text " + dir, expected);
  expect_one_line_error("calibrate" + tiny + " --text " + dir + " --out " + test::binary_path("never.json"), expected);
  expect_one_line_error("serve-bench" + tiny + " --requests 2 --text " + dir, expected);
  expect_one_line_error("eval" + tiny + " --context 64 --keep 0.7 --policies triattention --calibration " + dir,
                        expected);
  try {
    read_trace(dir);  // what kvscope-viz --trace reads
    ADD_FAILURE() << "read_trace read a directory";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  }
  std::filesystem::remove(dir);
}

TEST(BadInput, AModelFolderThatIsNotOneIsNamed) {
  // Once "/nowhere/config.json: cannot open: No such file or directory": the file the
  // program looked for, not the folder the user gave.
  const std::string empty = test::binary_path("not_a_model_" + std::to_string(::getpid()));
  std::filesystem::create_directory(empty);
  const std::string file = empty + "/notes.txt";
  std::fclose(std::fopen(file.c_str(), "w"));
  const std::string text = " --text " + test::source_path("assets/model/heldout.txt");
  for (const auto& [dir, expected] : {std::pair<std::string, std::string>{"/nowhere", "/nowhere: no such folder"},
                                      {file, file + ": is a file, not a model folder"},
                                      {empty, empty + ": no config.json (not a model folder)"}}) {
    const std::string model = " --model '" + dir + "'";
    expect_one_line_error("generate" + model + " --prompt hi", expected);
    expect_one_line_error("eval" + model + " --context 64 --keep 0.7" + text, expected);
    expect_one_line_error("heads" + model + text, expected);
    expect_one_line_error("serve-bench" + model + " --requests 2" + text, expected);
    expect_one_line_error("calibrate" + model + text + " --out " + test::binary_path("never.json"), expected);
    try {
      load_model(dir);  // what kvscope-viz --model and the tutorials load
      ADD_FAILURE() << "load_model read " << dir;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
  std::filesystem::remove_all(empty);
  expect_one_line_error("generate --model '' --prompt hi", "an empty model folder name");  // once ": no such folder"
  // And the other way round: a model folder where a config.json is asked for.
  const std::string model = test::tiny_model("tiny-tied");
  const std::string want = model + ": is a model folder, not a config.json; give " + model + "/config.json";
  expect_one_line_error("memory --config '" + model + "'", want);
  expect_one_line_error("bench decode --config '" + model + "'", want);
  expect_one_line_error("serve-bench --config '" + model + "'", want);
  expect_one_line_error("generate --prompt hi --model '" + model + "/config.json'",
                        model + "/config.json: is a file, not a model folder; give " + model);
}

// Once a floating-point exception (exit 136): 2^30 layers of head_dim 2^30 made
// the K/V bytes per token wrap to 0, and kvscope memory divided by it.
TEST(BadInput, AConfigTooLargeToCountIsRefused) {
  const std::string path = test::binary_path("huge_config_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 64,
    "num_hidden_layers": 1073741824, "num_attention_heads": 2, "num_key_value_heads": 2,
    "head_dim": 1073741824, "vocab_size": 64})";
  const std::string config = " --config '" + path + "'";
  const std::string want = path + ": num_attention_heads x head_dim = 2147483648 is more than kvscope handles (2^30)";
  expect_one_line_error("memory" + config, want);
  expect_one_line_error("bench decode" + config, want);
  expect_one_line_error("serve-bench" + config, want);
  std::remove(path.c_str());
}

// A text too short for one window names the flag to lower (the message said "use a
// shorter window", which is no flag, with eval's window of --context + 1 tokens).
TEST(BadInput, ATextTooShortForAWindowNamesTheFlagToLower) {
  const std::string text = testing::TempDir() + "kvscope-short.txt";
  std::ofstream(text) << "a few words, far fewer than a window";
  expect_one_line_error("eval --text '" + text + "' --context 128 --policies streaming --keep 0.5",
                        text + ": its one document is shorter than 129 tokens; a window is --context + 1 tokens: "
                               "lower --context");
  expect_one_line_error("heads --text '" + text + "' --length 128",
                        text + ": its one document is shorter than 128 tokens; lower --length");
  std::remove(text.c_str());
}

// heads' --from, when not given, is half of --length but leaves 10 middle keys or more.
TEST(BadInput, HeadsMeasuresFromHalfTheLengthOrLater) {
  EXPECT_NE(run_kvscope("heads --windows 1 --length 64").out.find("queries at positions 46..63"), std::string::npos);
  expect_one_line_error("heads --length 40",
                        "heads: --length 40 leaves no query to measure: the first is at --sinks + --recent + 10 = 46 "
                        "or later (so that 10 middle keys or more are measured)");
}

TEST(BadInput, MoreWindowsThanTheTextHoldsIsSaidNotHidden) {
  // `--windows 1000` on the bundled held-out text used to print "19 windows" with no
  // word that fewer were averaged than asked for.
  const char* expected = "(--windows 1000 asked for more: only 19 documents of the text are long enough)";
  const ProgramRun heads = run_kvscope("heads --windows 1000 --length 128 --from 64");
  EXPECT_EQ(heads.code, 0) << heads.err;
  EXPECT_NE(heads.out.find("19 windows of 128 tokens"), std::string::npos) << heads.out;
  EXPECT_NE(heads.out.find(expected), std::string::npos) << heads.out;
  const ProgramRun eval =
      run_kvscope("eval --windows 1000 --context 128 --continuation 4 --policies streaming --keep 0.5");
  EXPECT_EQ(eval.code, 0) << eval.err;
  EXPECT_NE(eval.out.find(expected), std::string::npos) << eval.out;
  EXPECT_EQ(run_kvscope("heads --windows 4 --length 128 --from 64").out.find("asked for more"), std::string::npos);
  // One window is "1 window", not "1 windows"; --from is half of --length unless given
  // (it was 256 whatever the length: --length 128 alone was refused for a --from never given).
  EXPECT_NE(run_kvscope("heads --windows 1 --length 128").out.find("\n1 window of 128 tokens; queries at positions "
                                                                   "64..127"),
            std::string::npos);
  EXPECT_NE(run_kvscope("eval --windows 1 --context 128 --continuation 4 --policies streaming --keep 0.5")
                .out.find("\n1 window of 128 tokens, "),
            std::string::npos);
  // A text of one long document: "only 1 document ... is", and heads' tally of one
  // sink reads "the first token".
  const std::string text = test::binary_path("one_document_" + std::to_string(::getpid()) + ".txt");
  std::FILE* f = std::fopen(text.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  for (int i = 0; i < 300; ++i) std::fputs("The json module reads a file. ", f);
  std::fclose(f);
  const char* one = "(--windows 3 asked for more: only 1 document of the text is long enough)";
  const ProgramRun heads1 = run_kvscope("heads --windows 3 --length 64 --from 32 --sinks 1 --recent 1 --text " + text);
  EXPECT_EQ(heads1.code, 0) << heads1.err;
  EXPECT_NE(heads1.out.find(one), std::string::npos) << heads1.out;
  EXPECT_NE(heads1.out.find(" heads give half their attention or more to the first token, "), std::string::npos)
      << heads1.out;
  EXPECT_NE(heads1.out.find(" to the newest 1;\n"), std::string::npos) << heads1.out;
  const ProgramRun eval1 =
      run_kvscope("eval --windows 3 --context 64 --continuation 4 --policies streaming --keep 0.5 --sinks 1 --recent 1"
                  " --text " + text);
  EXPECT_EQ(eval1.code, 0) << eval1.err;
  EXPECT_NE(eval1.out.find(one), std::string::npos) << eval1.out;
  std::remove(text.c_str());
}

// eval and heads read the model folder's heldout.txt when it has one, as serve-bench
// does (they read the bundled model's text whatever --model said); without one, the
// bundled model's. The first line names the text.
TEST(HeldOutText, TheModelFoldersOwnComesFirst) {
  const std::string name = "model_with_text_" + std::to_string(::getpid());
  const std::filesystem::path dir = test::binary_path(name);
  std::filesystem::create_directories(dir);
  const auto overwrite = std::filesystem::copy_options::overwrite_existing;
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"})
    std::filesystem::copy_file(test::tiny_model("tiny-tied") + "/" + f, dir / f, overwrite);
  std::filesystem::copy_file(test::source_path("assets/model/heldout.txt"), dir / "heldout.txt", overwrite);
  // `command` on a model folder; the first line ends with the text it read.
  auto first_line = [](const std::string& command, const std::string& model) {
    const ProgramRun r = run_kvscope(command + " --model '" + model + "'");
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out.substr(0, r.out.find('\n') + 1);
  };
  for (const std::string command :
       {"heads --windows 1 --length 64 --from 48 --recent 8",
        "eval --windows 1 --context 64 --continuation 2 --policies streaming --keep 0.5 --recent 8"}) {
    const std::string own = first_line(command, dir.string());
    EXPECT_NE(own.find(" on "), std::string::npos) << own;
    EXPECT_NE(own.find(name + "/heldout.txt\n", own.find(" on ")), std::string::npos) << own;
    const std::string bundled = first_line(command, test::tiny_model("tiny-tied"));
    EXPECT_NE(bundled.find(" on "), std::string::npos) << bundled;
    EXPECT_NE(bundled.find("assets/model/heldout.txt\n", bundled.find(" on ")), std::string::npos) << bundled;
  }
  // serve-bench cuts its prompts from the same text; random ids only for --config's random model.
  const std::string serve = "serve-bench --requests 2 --prompt-len 12 --output-len 4 --blocks 16 --block-size 4 "
                            "--repeat 1 --strategies none";
  const std::string own = first_line(serve, dir.string());
  EXPECT_NE(own.find(name + "/heldout.txt), greedy"), std::string::npos) << own;  // the path as shown_path() prints it
  const std::string bundled = first_line(serve, test::tiny_model("tiny-tied"));
  EXPECT_NE(bundled.find("assets/model/heldout.txt), greedy"), std::string::npos) << bundled;
  std::filesystem::remove_all(dir);
}

// A pool larger than the machine's memory is refused by name before any of it is
// allocated: it used to end as "out of memory", or, in the range the kernel overcommits,
// with the process killed while the slots were zero-filled. The check is against the
// available memory, at most the physical; a pool past the physical is refused for sure
// (one just past the available is not tried: what is available moves while tests run,
// and a check that let it through would fill the machine).
TEST(BadInput, APoolLargerThanTheMachineIsRefusedByName) {
  const size_t ram = physical_memory_bytes();
  if (ram == 0) GTEST_SKIP() << "sysconf cannot read this machine's physical memory";
  EXPECT_GT(available_memory_bytes(), 0u);
  EXPECT_LE(available_memory_bytes(), ram);
  const ModelConfig c = load_config(test::tiny_model("tiny-tied"));
  const size_t blocks = ram / KvStorage::bytes_per_block(c, 256) + 1;
  ASSERT_LT(blocks, size_t(1) << 30) << "a machine this large needs a bigger test model";
  try {
    KvStorage kv(c, int(blocks), 256);
    ADD_FAILURE() << blocks << " blocks fitted in " << ram << " bytes";
  } catch (const Error& e) {
    const std::string want = "not enough memory for the paged K/V storage (" + std::to_string(blocks) +
                             " blocks of 256 tokens; K and V of 2 layers, f32): ";
    EXPECT_EQ(std::string(e.what()).substr(0, want.size()), want) << e.what();
    EXPECT_NE(std::string(e.what()).find(" GB needed, "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(" GB available (of " + gigabytes(ram) + ")"), std::string::npos) << e.what();
  }
  // The cache's own table of slot positions (8 bytes a slot) is checked the same way.
  const size_t table_blocks = ram / (256 * sizeof(int64_t)) + 1;
  ASSERT_LT(table_blocks, size_t(INT32_MAX));
  try {
    PagedKvCache cache(int(table_blocks), 256, MemoryStrategy::Compact);
    ADD_FAILURE() << table_blocks << " blocks fitted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("not enough memory for the cache's slot table (", 0), 0u) << e.what();
  }
  // Through the program: one line, exit code 1 (--kv-memory is in MB).
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.0f", double(ram) * 1.01 / 1e6);
  expect_one_line_error(kTiny + "--prompt hi --kv-memory " + mb, "not enough memory for the paged K/V storage (");
  // Refused before the prompt is echoed: stdout stays empty.
  EXPECT_EQ(run_kvscope(kTiny + "--prompt hi --kv-memory " + mb).out, "");
}

TEST(BadInput, BenchmarksTooBigForTheMachineAreRefusedBeforeTheTable) {
  // These printed a table header, and bench decode built a model and measured the
  // bandwidth, before the first row failed to allocate or passed the model's positions.
  const std::string big = "1000000000";  // tokens: far more than any machine holds (224 KiB each)
  for (const std::string& args :
       {"bench compaction --tokens " + big, "bench attention --contexts 1024," + big, "bench decode --prompt-tokens " + big}) {
    const ProgramRun r = run_kvscope(args);
    EXPECT_EQ(r.out, "") << args << ": the table was begun";
  }
  expect_one_line_error("bench compaction --tokens " + big, "not enough memory for bench compaction of " + big +
                                                                " tokens (the K/V storage, and memcpy's two buffers): ");
  expect_one_line_error("bench attention --contexts 1024," + big,
                        "not enough memory for bench attention at a context of " + big + " tokens (256 queries; ");
  expect_one_line_error("bench attention --queries 1 --contexts " + big,
                        "not enough memory for bench attention at a context of " + big + " tokens (1 query; ");
  expect_one_line_error("bench decode --prompt-tokens 40961",
                        "bench decode: 40961 tokens (--prompt-tokens, or 16 + --decode-tokens) exceed the model's "
                        "max_position_embeddings (40960)");
  // A shape whose random weights do not fit: it measured the bandwidth and printed its
  // lines, then "out of memory" from inside. Qwen3-32B with 100 times the layers: 33 TB.
  std::string config = read_file(std::string(KVSCOPE_SOURCE_DIR) + "/assets/configs/qwen3-32b-config.json");
  const size_t layers = config.find("\"num_hidden_layers\": 64");
  ASSERT_NE(layers, std::string::npos);
  config.replace(layers, 23, "\"num_hidden_layers\": 6400");
  const std::string huge = testing::TempDir() + "huge-config.json";
  std::ofstream(huge) << config;
  const ProgramRun r = run_kvscope("bench decode --weights bf16 --config " + huge);
  EXPECT_EQ(r.out, "") << "the table was begun";
  expect_one_line_error("bench decode --weights bf16 --config " + huge,
                        "not enough memory for random bf16 weights of 3122185180160 parameters: ");
  expect_one_line_error("bench decode --decode-tokens 40945", "bench decode: 40961 tokens");
  // 16 + INT_MAX overflowed: it measured the bandwidth, then "block pool: needs at least one block, got -134217726".
  expect_one_line_error("bench decode --decode-tokens 2147483647", "bench decode: 2147483663 tokens");
  // On a GPU their sum overflowed into the pool's size; said first, with or without CUDA.
  expect_one_line_error("bench gpu-decode --prompt-tokens 512 --decode-tokens 2147483647",
                        "bench gpu-decode: --prompt-tokens 512 + --decode-tokens 2147483647 exceed the model's "
                        "max_position_embeddings (40960)");
}

// More threads than the machine has runs (the user may mean it), with a word on
// stderr: --threads 100000 once decoded the bundled model at 14 tokens/s, not 4,000, silently.
// Over 1,024 is refused: a team of 100,000 crashed inside libgomp (serve-bench, heads,
// bench decode: SIGSEGV).
TEST(BadInput, MoreThreadsThanTheMachineHasIsAWarning) {
  const std::string over = std::to_string(sysconf(_SC_NPROCESSORS_CONF) + 1);
  const ProgramRun r = run_kvscope(kTiny + "--prompt hi -n 2 --threads " + over);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("kvscope: warning: --threads " + over + " is more than the ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(" hardware threads here: the extra threads take turns and slow the run\n"), std::string::npos)
      << r.err;
  expect_no_warning(kTiny + "--prompt hi -n 2 --threads 1");
  expect_one_line_error(kTiny + "--prompt hi -n 2 --threads 100000",
                        "--threads 100000 is more than 1024, the most kvscope starts (there are ");
  expect_one_line_error("heads --length 64 --windows 1 --threads 1025", "--threads 1025 is more than 1024");
  expect_one_line_error("bench decode --threads 1,2147483647", "--threads 2147483647 is more than 1024");
}

// Without --threads (or with --threads 0) OpenMP starts OMP_NUM_THREADS threads: the
// same limit and warning, named so. OMP_NUM_THREADS=100000 crashed generate inside
// libgomp (SIGSEGV), and bench attention and simulate, which have no --threads, too.
TEST(BadInput, OmpNumThreadsMeetsTheSameLimitAsThreads) {
  const std::string huge = "OMP_NUM_THREADS=100000 ";
  for (const std::string& command : {kTiny + "--prompt hi -n 2", std::string("simulate --tokens 100")}) {
    const ProgramRun r = run_kvscope(command, huge);
    EXPECT_EQ(r.code, 1) << command;
    EXPECT_EQ(r.err.rfind("kvscope: error: OMP_NUM_THREADS=100000 is more than 1024, the most kvscope starts (there "
                          "are ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(" hardware threads here): lower it, unset it, or give --threads N\n"), std::string::npos)
        << r.err;
  }
  // --threads N replaces OpenMP's default: no word about it then (--threads 0 keeps it).
  const ProgramRun explicit_threads = run_kvscope(kTiny + "--prompt hi -n 2 --threads 1", huge);
  EXPECT_EQ(explicit_threads.code, 0) << explicit_threads.err;
  EXPECT_EQ(explicit_threads.err.find("OMP_NUM_THREADS"), std::string::npos) << explicit_threads.err;
  EXPECT_EQ(run_kvscope(kTiny + "--prompt hi -n 2 --threads 0", huge).code, 1);
  // Zero however written: "00" and "+0" once skipped the limit and started 100,000 threads.
  EXPECT_EQ(run_kvscope(kTiny + "--prompt hi -n 2 --threads 00", huge).code, 1);
  EXPECT_EQ(run_kvscope(kTiny + "--prompt hi -n 2 --threads=+0", huge).code, 1);
  EXPECT_EQ(run_kvscope("--help", huge).code, 0);  // help starts no thread
  const std::string over = std::to_string(sysconf(_SC_NPROCESSORS_CONF) + 1);
  const ProgramRun warned = run_kvscope(kTiny + "--prompt hi -n 2", "OMP_NUM_THREADS=" + over + " ");
  EXPECT_EQ(warned.code, 0) << warned.err;
  EXPECT_EQ(warned.err.rfind("kvscope: warning: OMP_NUM_THREADS=" + over + " is more than the ", 0), 0u) << warned.err;
}

// bench decode measures a list of thread counts: the same warning for the largest. And
// a bandwidth probe small enough to sit in the L3 cache measures the cache, not DRAM.
TEST(BadInput, BenchDecodeWarnsOfTooManyThreadsAndAProbeTheCacheHolds) {
  const std::string over = std::to_string(sysconf(_SC_NPROCESSORS_CONF) + 1);  // more than this process may use
  const std::string bench = "bench decode --config '" + test::tiny_model("tiny-tied") +
                            "/config.json' --weights f32 --prompt-tokens 8 --decode-tokens 2 --bandwidth-gib 0.001 ";
  const ProgramRun r = run_kvscope(bench + "--threads 1," + over);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("kvscope: warning: --threads " + over + " is more than the ", 0), 0u) << r.err;
  EXPECT_NE(r.out.find("streaming sum over 1.02 MiB"), std::string::npos) << r.out;  // not "0.0 GiB", nor "1.0"
  EXPECT_NE(r.out.find("M parameters), random weights"), std::string::npos) << r.out;  // not "0.00B"
  const bool l3_known = sysconf(_SC_LEVEL3_CACHE_SIZE) > 0;
  EXPECT_EQ(r.err.find("kvscope: warning: --bandwidth-gib 0.001 is less than twice the L3 cache") != std::string::npos,
            l3_known)
      << r.err;
  const ProgramRun one = run_kvscope(bench + "--threads 1");
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(one.err.find("--threads"), std::string::npos) << one.err;
}

// An output that names a file the run reads, or that another output names, is refused
// before anything is written: serve-bench --json F --trace F kept only the trace, and
// generate --trace over the model's safetensors destroyed the checkpoint.
TEST(BadInput, AnOutputThatWouldDestroyAFileIsRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / "kvscope-outputs-apart";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(test::tiny_model("tiny-tied"), dir / "model");  // a copy: a failing check must not destroy the fixture
  const std::string model = (dir / "model").string(), weights = model + "/model.safetensors";
  const auto size = fs::file_size(weights);
  expect_one_line_error("generate --model '" + model + "' --prompt hi -n 2 --trace '" + weights + "'",
                        "--trace " + weights + " is the model's model.safetensors, which this run reads");
  EXPECT_EQ(fs::file_size(weights), size);
  const std::string same = (dir / "same.out").string();
  expect_one_line_error("serve-bench --model '" + model + "' --requests 2 --prompt-len 8 --output-len 4 --json '" +
                            same + "' --trace '" + dir.string() + "/./same.out'",
                        "--json and --trace both name " + same + ": each output needs a file of its own");
  EXPECT_FALSE(fs::exists(same));
  const std::string text = (dir / "text.txt").string();
  std::ofstream(text) << "some text to calibrate on\n";
  expect_one_line_error("calibrate --model '" + model + "' --text '" + text + "' --out '" + text + "'",
                        "--out " + text + " is --text, which this run reads");
  EXPECT_EQ(read_file(text), "some text to calibrate on\n");
  // The model's held-out text, which calibrate does not read but eval and heads do
  // (calibrate --out over it once replaced the evaluation text with a calibration).
  const std::string heldout = model + "/heldout.txt";
  std::ofstream(heldout) << "held-out text\n";
  expect_one_line_error("calibrate --model '" + model + "' --text '" + text + "' --out '" + heldout + "'",
                        "--out " + heldout +
                            " is the model's heldout.txt, the held-out text eval, heads and serve-bench read");
  EXPECT_EQ(read_file(heldout), "held-out text\n");
  const std::string config = (dir / "config.json").string();  // simulate --trace over its --config wrote a trace there
  fs::copy_file(model + "/config.json", config);
  expect_one_line_error("simulate --tokens 100 --strategy holes --config '" + config + "' --trace '" + config + "'",
                        "--trace " + config + " is --config, which this run reads");
  EXPECT_EQ(read_file(config), read_file(model + "/config.json"));
  // The model folder's calibration, which generate, eval and serve-bench read when no
  // --calibration is given (the check happens before it is read: any content will do).
  const std::string calibration = model + "/triattention-calibration.json";
  std::ofstream(calibration) << "{}\n";
  const std::string destroyed = " is the model's triattention-calibration.json, which this run reads";
  expect_one_line_error("generate --model '" + model + "' --prompt hi -n 2 --trace '" + calibration + "'",
                        "--trace " + calibration + destroyed);
  expect_one_line_error("eval --model '" + model + "' --json '" + calibration + "'",
                        "--json " + calibration + destroyed);
  expect_one_line_error("serve-bench --model '" + model + "' --trace '" + calibration + "'",
                        "--trace " + calibration + destroyed);
  EXPECT_EQ(read_file(calibration), "{}\n");
  fs::remove_all(dir);
}

// A model folder's heldout.txt or generation_config.json that is a directory was
// passed over as if absent (eval ran on the bundled model's text, saying so only in
// its header); a device has no end to read to (memory --config /dev/zero grew without
// bound). Both are refused, naming the path.
TEST(BadInput, AFileThatIsADirectoryOrADeviceIsRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = tiny_model_copy("kvscope-not-files");
  fs::create_directory(dir / "heldout.txt");
  expect_one_line_error("eval --model '" + dir.string() +
                            "' --policies h2o --windows 1 --context 128 --continuation 4 --keep 0.5",
                        (dir / "heldout.txt").string() + ": is a directory, not a file");
  fs::remove(dir / "generation_config.json");
  fs::create_directory(dir / "generation_config.json");
  expect_one_line_error("generate --model '" + dir.string() + "' --prompt hi -n 1",
                        (dir / "generation_config.json").string() + ": is a directory, not a file");
  expect_one_line_error("memory --config /dev/zero", "/dev/zero: not a regular file");
  fs::remove_all(dir);
}

// Eviction asked for, in a run too short for its first round: said before the text
// (the stats' "0 rounds" came after it).
TEST(BadInput, EvictionThatWillNeverRunIsAWarning) {
  const ProgramRun r = run_kvscope(kTiny + "--prompt hi -n 4 --budget 40");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("kvscope: warning: --budget 40 + --slack 128 = 168 live tokens start a round, and this run "
                        "feeds 5 tokens (2 prompt + 4 new - 1): nothing will be evicted\n", 0), 0u) << r.err;
  expect_no_warning(kTiny + "--prompt hi -n 200 --budget 40");
}

// An EOS id past the vocabulary (a typo) can never be drawn: the run would stop only
// at -n, as if the model had no EOS. Said once, naming the id; the reachable ids are not named.
TEST(BadInput, AnEosIdTheModelCannotWriteIsAWarning) {
  namespace fs = std::filesystem;
  const fs::path dir = tiny_model_copy("kvscope-eos-past-vocab");
  nlohmann::json config = nlohmann::json::parse(read_file((dir / "config.json").string()));
  config["eos_token_id"] = {378, 5000};
  std::ofstream((dir / "config.json").string()) << config.dump();
  const ProgramRun r = run_kvscope("generate --model '" + dir.string() + "' --prompt hi -n 3");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("kvscope: warning: eos_token_id 5000: not a token this model writes (ids 0 to 378), so "
                        "generation never stops at it\n", 0), 0u) << r.err;
  expect_no_warning(kTiny + "--prompt hi -n 3");  // 378 and 376 are tokens
  fs::remove_all(dir);
}

// tokenizer.json and a calibration nested 100,000 deep: a crash (SIGSEGV) in the
// tokenizer's copy of its pre-tokenizer, now refused by depth before either is parsed.
// (The checkpoint's files: BrokenCheckpoint.JsonNestedDeeperThanAnyRealFileIsRefused.)
TEST(BadInput, TokenizerAndCalibrationNestedTooDeepAreRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = tiny_model_copy("kvscope-deep-json");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string tokenizer = read_file((dir / "tokenizer.json").string());
  std::ofstream((dir / "tokenizer.json").string()) << "{\"pre\": " << deep << ", " << tokenizer.substr(1);
  expect_one_line_error("generate --model '" + dir.string() + "' --prompt hi -n 2",
                        (dir / "tokenizer.json").string() + ": JSON nested more than 64 levels deep");
  std::ofstream((dir / "tokenizer.json").string()) << tokenizer;
  const std::string calibration = (dir / "calibration.json").string();
  std::ofstream(calibration) << "{\"version\": " << deep << "}";
  expect_one_line_error("generate --model '" + dir.string() + "' --prompt hi -n 2 --budget 40 --policy triattention "
                        "--calibration '" + calibration + "'",
                        calibration + ": JSON nested more than 64 levels deep");
  fs::remove_all(dir);
}

TEST(BadInput, SamplingFlagsUnderGreedyDecodingAreAWarning) {
  // --temperature 0 takes the most likely token: --top-k, --top-p and --seed change
  // nothing, and once went unused without a word.
  const ProgramRun r = run_kvscope(kTiny + "--prompt hi -n 2 --top-k 5 --seed 3");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("kvscope: warning: --top-k, --seed: no effect with --temperature 0 (greedy: the most likely "
                        "token at every step)\n", 0), 0u) << r.err;
  EXPECT_EQ(r.out, run_kvscope(kTiny + "--prompt hi -n 2").out);  // the same text: they changed nothing
  // Sampling uses them: no warning.
  const std::string sampled = "generate --model '" + test::tiny_model("tiny-tied") + "' --prompt hi -n 2 ";
  expect_no_warning(sampled + "--top-k 5 --top-p 0.9 --seed 3");
  // Greedy, but --policy random draws its evictions from the seed: no warning for it
  // (once "--seed: no effect", and seeds 1 and 2 wrote different text).
  const std::string random = "--prompt hi -n 60 --budget 40 --slack 8 --policy random";
  const ProgramRun one = run_kvscope(kTiny + random + " --seed 1"), two = run_kvscope(kTiny + random + " --seed 2");
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(one.err.find("warning"), std::string::npos) << one.err;
  EXPECT_NE(one.out, two.out) << "the seed chose no other tokens to evict";
  EXPECT_EQ(run_kvscope(kTiny + random + " --seed 1 --top-k 5").err.rfind("kvscope: warning: --top-k: no effect", 0),
            0u);
}

TEST(BadInput, KvMemoryTooSmallForOneBlockOrTooLargeForAPool) {
  // tiny-tied: 2 layers x 16 slots x 64 K and 64 V floats = 16384 bytes a block.
  const ModelConfig c = load_config(test::tiny_model("tiny-tied"));
  EXPECT_EQ(KvStorage::bytes_per_block(c, 16), 16384u);
  try {
    blocks_for_budget(c, 16, 16383);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "a KV memory budget of 16,383 bytes is smaller than one block (16,384 bytes for 16 tokens)");
  }
  expect_one_line_error(kTiny + "--prompt hi --kv-memory 0.01",
                        "--kv-memory 0.01: a KV memory budget of 10,000 bytes is smaller than one block (16,384 bytes for 16 tokens)");
  // MB to whole bytes, rounded: 0.016307 * 1e6 is 16306.99... as a double.
  expect_one_line_error(kTiny + "--prompt hi --kv-memory 0.016307",
                        "--kv-memory 0.016307: a KV memory budget of 16,307 bytes is smaller than one block (16,384 bytes for 16 tokens)");
  expect_one_line_error(kTiny + "--prompt hi --kv-memory -1", "--kv-memory: must be 0 or more, not -1");
  // And more blocks than a pool numbers (block ids are ints), before any memory is asked for.
  expect_one_line_error(kTiny + "--prompt hi --kv-memory 100000000",
                        "--kv-memory 100000000: a KV memory budget of 100,000,000,000,000 bytes is 6,103,515,625 blocks of 16,384 bytes; a "
                        "pool holds at most 1,073,741,824 (2^30)");
  // Before the weights load (as the README says): a checkpoint cut to 100 bytes is not
  // read. Once its error came first, and a real checkpoint loaded gigabytes to be refused.
  namespace fs = std::filesystem;
  const fs::path dir = tiny_model_copy("kvscope-pool-before-weights");
  fs::resize_file(dir / "model.safetensors", 100);
  expect_one_line_error("generate --model '" + dir.string() + "' --prompt hi --kv-memory 0.01",
                        "a KV memory budget of 10,000 bytes is smaller than one block (16,384 bytes for 16 tokens)");
  expect_one_line_error("generate --model '" + dir.string() + "' --prompt hi -n 40 --kv-memory 0.02",
                        "this run feeds 41 tokens (2 prompt + 40 new - 1), more than the pool can hold: ");
}

TEST(BadInput, PoolExhaustedMidGenerationRefusesTheStep) {
  // Six blocks of 16 slots, random eviction to 32 of every 48 tokens, holes only: the
  // survivors pin nearly every block, and a later token has nowhere to go. The text
  // streamed so far stays printed and ends its line (in a terminal the error would
  // otherwise run on from the text); then the refusal, on one line.
  const ProgramRun r = run_kvscope(kTiny + "--prompt 'Once upon' -n 300 --kv-memory 0.1 --budget 32 --slack 16 "
                                           "--recent 8 --policy random --strategy holes");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon", 0), 0u) << r.out;
  EXPECT_GT(r.out.size(), std::string("Once upon").size()) << "no token was generated before the pool ran out";
  EXPECT_EQ(r.out.back(), '\n') << r.out;
  const std::string want =
      "kvscope: error: block pool exhausted: sequence 0 needs room for 1 more token, the pool has 0 (0 free blocks of "
      "16); the step is refused and the sequence is unchanged. --kv-memory 0.1 MB holds 6 blocks (96 tokens), and "
      "under --strategy holes a block goes back only when every token in it is evicted: use --strategy compact, or "
      "raise --kv-memory\n";
  EXPECT_EQ(r.err, want);

  // With --trace, the run up to the refused step is written, and it replays: it
  // shows what filled the pool.
  const std::string path = testing::TempDir() + "exhausted.trace";
  const ProgramRun traced = run_kvscope(kTiny + "--prompt 'Once upon' -n 300 --kv-memory 0.1 --budget 32 --slack 16 "
                                                "--recent 8 --policy random --strategy holes --trace " + path);
  EXPECT_EQ(traced.code, 1);
  EXPECT_EQ(traced.err, want.substr(0, want.size() - 1) + " (the run up to that step: " + path + ")\n");
  test::expect_the_trace_of_a_refused_run(path, /*num_blocks=*/6);
  std::remove(path.c_str());
  // A trace that cannot be written does not hide the refusal (once only "/dev/full:
  // write failed" was said, and why the run stopped was lost).
  const ProgramRun unwritten = run_kvscope(kTiny + "--prompt 'Once upon' -n 300 --kv-memory 0.1 --budget 32 --slack 16 "
                                                   "--recent 8 --policy random --strategy holes --trace /dev/full");
  EXPECT_EQ(unwritten.code, 1);
  EXPECT_EQ(unwritten.err, want.substr(0, want.size() - 1) + " (the trace of the run up to that step was not written: "
                                                             "/dev/full: write failed (disk full?))\n");
}

// An output file that cannot be written whole is an error, and what was there before
// stays. Once eval and serve-bench checked their --json before the bytes left the
// stream's buffer: "wrote /dev/full", exit 0, and an empty file on a full disk; and a
// trace that filled the disk replaced the last good one with a part of itself.
TEST(BadInput, AnOutputThatCannotBeWrittenWholeIsAnErrorAndTheOldFileStays) {
  const std::string tiny = "--model '" + test::tiny_model("tiny-tied") + "' ";
  expect_one_line_error("eval " + tiny + "--windows 1 --context 64 --continuation 2 --keep 0.5 --policies streaming "
                        "--recent 8 --json /dev/full", "/dev/full: write failed (disk full?)");
  expect_one_line_error("serve-bench " + tiny + "--requests 2 --prompt-len 16 --output-len 8 --repeat 1 --strategies "
                        "holes --budget 8 --slack 4 --sinks 1 --recent 2 --blocks 16 --block-size 4 --json /dev/full",
                        "/dev/full: write failed (disk full?)");
  const std::string path = testing::TempDir() + "last-good.trace";
  { std::ofstream(path) << "the last good trace"; }
  // A file size limit of 4 KiB (ulimit -f counts 512-byte blocks in sh) stands in for a full disk.
  const test::ProgramRun r = test::run_shell("trap '' XFSZ; ulimit -f 8; " + test::binary_path("kvscope") +
                                             " simulate --tokens 4000 --budget 512 --strategy holes --trace " + path +
                                             " 2>&1 >/dev/null");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(r.output, "kvscope: error: " + path + ": write failed (disk full?): not written\n");
  EXPECT_EQ(read_file(path), "the last good trace");
  std::remove(path.c_str());
}

TEST(BadInput, APoolThatMustRunOutIsRefusedBeforeTheRun) {
  // One block of 16 slots and no eviction: the 17th token fed would have nowhere to
  // go. Once the run printed 16 tokens of text and then stopped; now it is refused
  // before any text, as serve-bench refuses a pool too small for one request.
  const ProgramRun r = run_kvscope(kTiny + "--prompt 'Once upon' -n 40 --kv-memory 0.02");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "kvscope: error: this run feeds 47 tokens (8 prompt + 40 new - 1), more than the pool can hold: --kv-memory "
            "0.02 MB holds 1 block (16 tokens) and nothing is evicted: raise --kv-memory, or evict with a --budget and "
            "--slack that add up to at most 16 tokens (and --sinks + --recent, which the budget keeps, below that)\n");
  // Following that advice finishes the run. (Once it said only "or evict with --budget",
  // and every budget the defaults allow, 36 and up, was refused again.)
  const ProgramRun advised = run_kvscope(kTiny + "--prompt 'Once upon' -n 40 --kv-memory 0.02 --budget 8 --slack 8 "
                                                 "--sinks 2 --recent 4");
  EXPECT_EQ(advised.code, 0) << advised.err;
  // At the edge: 8 prompt + 9 new - 1 = 16 tokens fed fill the block and finish.
  const ProgramRun full = run_kvscope(kTiny + "--prompt 'Once upon' -n 9 --kv-memory 0.02");
  EXPECT_EQ(full.code, 0) << full.err;
  EXPECT_NE(full.err.find("16 tokens cached in 1 block"), std::string::npos) << full.err;
  // A round that waits for more live tokens than the pool holds frees nothing first.
  expect_one_line_error(kTiny + "--prompt hi -n 100 --kv-memory 0.05 --budget 40 --slack 16 --recent 8",
                        "this run feeds 101 tokens (2 prompt + 100 new - 1), more than the pool can hold: --kv-memory "
                        "0.05 MB holds 3 blocks (48 tokens), fewer than a round waits for (--budget 40 + --slack 16)");
  // With no new tokens the prompt alone is fed.
  expect_one_line_error(kTiny + "--prompt '" + std::string(200, 'x') + "' -n 0 --kv-memory 0.02",
                        "this run feeds 200 tokens (the prompt alone), more than the pool can hold");
}

TEST(BadInput, AFullPoolSaysWhichFlagWouldMakeRoom) {
  // The tiny model's K and V take 1,024 bytes a token: --kv-memory 0.1 is 6 blocks of 16.
  expect_one_line_error(kTiny + "--prompt '" + std::string(200, 'x') + "' --kv-memory 0.02",
                        "--kv-memory 0.02 MB holds 1 block (16 tokens), fewer than the prompt's");
  expect_one_line_error(kTiny + "--prompt hi -n 100 --kv-memory 0.05 --budget 40 --slack 16 --recent 8",
                        "--kv-memory 0.05 MB holds 3 blocks (48 tokens), fewer than a round waits for (--budget 40 + "
                        "--slack 16): lower them, or raise --kv-memory");
  // The project's point, in a refusal: random eviction keeps 32 of every 48 tokens,
  // scattered, so with holes only nearly every block keeps a survivor and the pool
  // fills; the same run with compaction gives the emptied blocks back and finishes.
  const std::string run = kTiny + "--prompt hi -n 300 --kv-memory 0.1 --budget 32 --slack 16 --recent 8 --policy random ";
  expect_one_line_error(run + "--strategy holes",
                        "--kv-memory 0.1 MB holds 6 blocks (96 tokens), and under --strategy holes a block goes back "
                        "only when every token in it is evicted: use --strategy compact, or raise --kv-memory");
  const ProgramRun compacted = run_kvscope(run + "--strategy compact");
  EXPECT_EQ(compacted.code, 0) << compacted.err;
  EXPECT_NE(compacted.err.find("decode: 300 tokens"), std::string::npos) << compacted.err;

  // The README's example: the bundled model, H2O (the default policy).
  const std::string readme = "generate --prompt 'The json module' -n 300 --budget 32 --slack 8 --recent 8 "
                             "--kv-memory 0.3 --seed 1 --strategy ";
  expect_one_line_error(readme + "holes",
                        "--kv-memory 0.3 MB holds 9 blocks (144 tokens), and under --strategy holes a block goes back "
                        "only when every token in it is evicted: use --strategy compact, or raise --kv-memory");
  EXPECT_EQ(run_kvscope(readme + "compact").code, 0);
}

// --threads 1024 is the most kvscope starts: it is a warning (more than the cores
// here), not the refusal 1025 gets. eval checks --threads before the model, so a
// missing model ends the run without starting a thread.
TEST(BadInput, TheMostThreadsIsAWarningNotARefusal) {
  const ProgramRun r = run_kvscope("eval --threads 1024 --model /nowhere");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("kvscope: warning: --threads 1024 is more than the ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("\nkvscope: error: /nowhere: "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("more than 1024"), std::string::npos) << r.err;
}

// An output named as --calibration is refused even when the model folder has a
// calibration of its own to protect (there, once, only the folder's was looked at).
TEST(BadInput, AnOutputThatWouldDestroyTheGivenCalibrationIsRefused) {
  const std::string calibration = test::binary_path("calibration_" + std::to_string(::getpid()) + ".json");
  { std::ofstream(calibration) << "{}\n"; }
  const std::string tiny = "--model '" + test::tiny_model("tiny-tied") + "' ";
  expect_one_line_error("eval " + tiny + "--policies triattention --calibration " + calibration + " --json " +
                            calibration,
                        "--json " + calibration + " is --calibration, which this run reads");
  expect_one_line_error("generate " + tiny + "--prompt hi -n 1 --policy triattention --budget 40 --calibration " +
                            calibration + " --trace " + calibration,
                        "--trace " + calibration + " is --calibration, which this run reads");
  EXPECT_EQ(read_file(calibration), "{}\n");
  std::remove(calibration.c_str());
}

// A model folder's triattention-calibration.json that is a directory is refused by
// name, as its heldout.txt is; it once counted as no calibration at all ("needs a
// calibration file: make one with kvscope calibrate").
TEST(BadInput, AModelFoldersCalibrationThatIsADirectoryIsRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = tiny_model_copy("kvscope-calibration-dir");
  fs::create_directory(dir / "triattention-calibration.json");
  expect_one_line_error("eval --model '" + dir.string() + "' --policies triattention --windows 1 --context 64 "
                        "--continuation 2 --keep 0.5 --recent 8",
                        (dir / "triattention-calibration.json").string() + ": is a directory, not a file");
  fs::remove_all(dir);
}

// An allocation that fails (here under a 600 MB address-space limit) is one line,
// "out of memory", not std::bad_alloc's what(). 20 million tokens take about 1.6 GB:
// past the limit, and within kvscope's own check of the machine's memory anywhere.
TEST(BadInput, AnAllocationThatFailsIsOutOfMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit allows";
#else
  const test::ProgramRun r = test::run_shell("ulimit -v 600000; " + test::binary_path("kvscope") +
                                             " simulate --tokens 20000000 2>&1 >/dev/null");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.output, "kvscope: error: out of memory\n");
#endif
}

}  // namespace
}  // namespace kvscope
