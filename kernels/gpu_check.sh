#!/usr/bin/env bash
# kernels/gpu_check.sh: the one run on a machine with a CUDA GPU.
#
# Builds kvscope with the CUDA backend (Release, for this GPU's architecture
# only), lists the devices, runs the GPU tests and the GPU benchmarks, and
# writes the commands with their full output to a Markdown report:
#   $OUT/gpu-results.md when OUT is set, else docs/gpu-results.md
# Every step has a time limit; a failed step is recorded and the next one runs.
# Planned for about 10 minutes on one H200 (most of it the build).
#
#   bash kernels/gpu_check.sh            # BUILD=build-gpu JOBS=16 by default
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-16}
if [ -n "${OUT:-}" ]; then REPORT=$OUT/gpu-results.md; else REPORT=docs/gpu-results.md; fi
mkdir -p "$(dirname "$REPORT")"

# run LIMIT_SECONDS COMMAND...: the command and its output (stdout and stderr) into
# the report as a code block, and on the terminal; returns the command's exit code.
run() {
  local limit=$1
  shift
  { echo; echo '```'; echo "\$ $*"; } | tee -a "$REPORT"
  timeout "$limit" "$@" 2>&1 | tee -a "$REPORT"
  local rc=${PIPESTATUS[0]}
  { echo "(exit code $rc$([ "$rc" = 124 ] && echo ": stopped after ${limit} s"))"; echo '```'; } | tee -a "$REPORT"
  return "$rc"
}
section() { printf '\n## %s\n\n%s\n' "$1" "$2" | tee -a "$REPORT"; }

gpu_name=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
{
  echo "# kvscope on a CUDA GPU"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- GPU (nvidia-smi: name, driver, memory): ${gpu_name:-nvidia-smi found no GPU}"
  echo "- CUDA compiler: ${nvcc:-none found} $([ -n "$nvcc" ] && "$nvcc" --version | tail -1)"
  echo "- host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "- produced by: bash kernels/gpu_check.sh (BUILD=$BUILD, JOBS=$JOBS)"
} | tee "$REPORT"

section "Build" "Release, CUDA architecture ${arch:-default (80-real 90)}; only the program and the tests."
cmake_args=(-S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_CUDA=ON)
[ -n "$arch" ] && cmake_args+=("-DCMAKE_CUDA_ARCHITECTURES=$arch")
[ -n "$nvcc" ] && cmake_args+=("-DCMAKE_CUDA_COMPILER=$nvcc")
if ! run 120 cmake "${cmake_args[@]}" || ! run 420 cmake --build "$BUILD" -j "$JOBS" --target kvscope kvscope_tests; then
  section "Stopped" "The build failed; nothing else was run."
  exit 1
fi

section "Devices" "What the build sees, with the peak memory bandwidth the benchmarks compare against."
run 30 "$BUILD/kvscope" devices

section "GPU tests" "Every kernel against its CPU operation, the model's logits on the test checkpoints (prefill and 32 decode steps), and eviction + compaction through the engine, GPU versus CPU (tests/gpu_*_test.cpp); plus the --device option's messages."
run 300 "$BUILD/kvscope_tests" --gtest_filter='Gpu*:DeviceOption*'

section "Benchmarks" "Paged decode attention bandwidth and eager versus flash; compaction versus cudaMemcpy; end-to-end decode of a Qwen3-0.6B-shaped random model."
run 150 "$BUILD/kvscope" bench gpu-attention
run 90 "$BUILD/kvscope" bench gpu-compaction
run 150 "$BUILD/kvscope" bench gpu-decode

echo
echo "report: $REPORT"
