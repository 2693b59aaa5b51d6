// kvscope bench: placeholder replaced below.
#include "cli/commands.h"
namespace kvscope::cli {
void add_bench_command(CLI::App&) {}
}  // namespace kvscope::cli
