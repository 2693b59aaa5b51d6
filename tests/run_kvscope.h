// Runs the kvscope program (or any command) from a test: its exit code and its
// output (stdout and stderr together), as a user at a terminal would see them;
// or, with run_shell, exactly the streams the command line's redirections send
// to stdout.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "test_paths.h"

namespace kvscope::test {

struct ProgramRun {
  int code;            // exit code; -1 when it did not exit normally (a crash)
  std::string output;  // stdout and stderr
};

// A shell command line as written: its exit code and what it writes to stdout
// (its redirections choose the streams, e.g. "2>&1 >/dev/null" for stderr alone).
inline ProgramRun run_shell(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A shell command line, with its stderr joined to its stdout.
inline ProgramRun run_command(const std::string& command) { return run_shell(command + " 2>&1"); }

inline ProgramRun run_kvscope(const std::string& args) { return run_command(binary_path("kvscope") + " " + args); }

}  // namespace kvscope::test
