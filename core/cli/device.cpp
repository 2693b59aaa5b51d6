// --device cpu|cuda: which backend runs the model (model/backend.h).
// The CUDA backend exists only when this program was built with the toolkit
// (KVSCOPE_HAVE_CUDA, set by linking kernels/); the machine must also have a GPU.
#include "cli/commands.h"
#include "util/error.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "cuda_backend.h"
#include "gpu_devices.h"
#endif

namespace kvscope::cli {

BackendFactory backend_for_device(const std::string& device) {
  if (device == "cpu") return {};  // the engine's default
  if (device != "cuda") throw Error("--device must be cpu or cuda, got \"" + device + "\"");
#ifdef KVSCOPE_HAVE_CUDA
  std::string why;
  if (!cuda::gpu_available(why)) throw Error("--device cuda: no CUDA GPU found (" + why + ")");
  return cuda::make_backend;
#else
  throw Error("--device cuda: this build has no CUDA backend (no CUDA toolkit was found at configure time)");
#endif
}

std::string gpu_name() {
#ifdef KVSCOPE_HAVE_CUDA
  std::string why;
  const std::vector<cuda::GpuInfo> gpus = cuda::list_gpus(why);
  if (!gpus.empty()) return "CUDA GPU 0, " + gpus[0].name;
#endif
  return "no CUDA GPU";
}

}  // namespace kvscope::cli
