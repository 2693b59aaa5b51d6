// kvscope devices: what this build can run on (the CPU always; CUDA GPUs when
// the build has the CUDA backend and the machine has a GPU and a driver).
#include <omp.h>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "util/format.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "gpu_devices.h"
#endif

namespace kvscope::cli {

static void run_devices() {
  std::printf("cpu: %s\n", plural(omp_get_max_threads(), "OpenMP thread").c_str());
#ifdef KVSCOPE_HAVE_CUDA
  std::string why;
  auto gpus = cuda::list_gpus(why);
  if (gpus.empty()) std::printf("cuda: built in, but no GPU (%s)\n", why.c_str());
  for (const auto& g : gpus)
    std::printf("cuda:%d %s, sm_%d%d, %.1f GiB, %s\n", g.index, g.name.c_str(), g.compute_major, g.compute_minor,
                double(g.memory_bytes) / (1u << 30), g.peak_text().c_str());
#else
  std::printf("cuda: not built (no CUDA toolkit found at configure time)\n");
#endif
}

void add_devices_command(CLI::App& app) {
  app.add_subcommand("devices", "List the devices kvscope can run on")->callback(run_devices);
}

}  // namespace kvscope::cli
