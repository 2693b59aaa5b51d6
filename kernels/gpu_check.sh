#!/usr/bin/env bash
# kernels/gpu_check.sh: the one run on a machine with a CUDA GPU.
#
# Lists the devices, runs the GPU tests (and reruns the first 8 that fail, one
# process each), the GPU benchmarks, serve-bench on the GPU, the kernel tests under
# compute-sanitizer and Nsight Compute on the two decode kernels, and writes the commands with their full
# output to a Markdown report:
#   $OUT/gpu-results.md when OUT is set, else kernels/gpu-results.md, beside this
#   script (the design card fixes the top level, which has no docs/)
# Every step has a time limit, and all of them together a budget (BUDGET, default
# 540 s: the device tool allows 600 s a call, and a task's 15 minutes of device time
# include the machine's start, so there is no second try; with less left, as its
# status says, give BUDGET that minus a minute): a step gets the smaller of its own
# limit and what is left, and once less than 10 s is left the rest are listed as
# skipped. A failed step is recorded and the next one runs; the report ends with a
# summary of the steps that failed or were skipped, and the script exits 1 if any failed.
#
# The GPU machine the device tool lends has, by the tool's notes, CUDA 13, CMake
# and a compiler; the Debian packages kvscope builds against (Eigen, CLI11, PCRE2,
# utf8proc, GoogleTest) are not among what it is known to have, and it cannot download
# anything. So the programs are built on the development machine (Debian 12, the
# same CUDA 13.0) and travel to it:
#
#   bash kernels/gpu_check.sh --prepare   # here: builds build-gpu/ (kvscope, kvscope_tests) for
#                                         # sm_90 (H100/H200; ARCH=80 for an A100) and any x86-64
#                                         # CPU with AVX2 (CPU_ARCH=x86-64-v3), and copies the
#                                         # shared libraries the GPU machine may lack to build-gpu/lib
#   bash kernels/gpu_check.sh             # there, with build-gpu/kvscope, build-gpu/kvscope_tests
#                                         # and build-gpu/lib carried (planned for a few minutes)
#
# With this project's device tool: run(command="bash kernels/gpu_check.sh", timeout_s=600,
# carry=["build-gpu/kvscope", "build-gpu/kvscope_tests", "build-gpu/lib"]); the report
# comes back as gpu-results.md, to be committed as kernels/gpu-results.md. Prepare in the
# checkout the tool copies (the session's own): a build in another clone does not travel.
#
# The programs find the repository's files (test models, configs) by the absolute
# path they were built in; where the copy lives elsewhere, a symbolic link at that
# path leads to it. Without prebuilt programs the script builds them there
# (BUILD=build-gpu JOBS=16), which works only where those packages are installed.
set -u
# One word at most, --prepare; anything else (a typo of it, say) would run the GPU
# check here and write a report of a machine without a GPU.
if [ $# -gt 1 ] || { [ $# = 1 ] && [ "$1" != --prepare ]; }; then
  echo "gpu_check.sh: expects no argument (the run on the GPU machine) or --prepare (the build here), got '$*'" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-16}
BUDGET=${BUDGET:-540}
started=$SECONDS
failed_steps=()   # "COMMAND (exit code N...)" of each step that failed, for the summary
skipped_steps=()  # the commands the budget left no time for
if [ -n "${OUT:-}" ]; then REPORT=$OUT/gpu-results.md; else REPORT=kernels/gpu-results.md; fi
mkdir -p "$(dirname "$REPORT")"

# stdbuf -oL: a program's tables reach the report line by line, so a step stopped at
# its limit keeps what it printed (into a pipe, stdout is flushed only at exit).
LINE_BUFFERED=$(command -v stdbuf > /dev/null && echo "stdbuf -oL")

# run LIMIT_SECONDS COMMAND...: the command and its output (stdout and stderr) into
# the report as a code block, and on the terminal; returns the command's exit code.
# The limit is cut to what is left of BUDGET; with under 10 s left the command is skipped.
# A command that ignores the TERM at its limit (stuck in the driver) is killed 10 s later.
run() {
  local limit=$1 left=$((BUDGET - (SECONDS - started)))
  shift
  if [ "$left" -lt 10 ]; then
    printf '\n(skipped, %s s of the %s s budget left): %s\n' "$left" "$BUDGET" "$*" | tee -a "$REPORT"
    skipped_steps+=("$*")
    return 124
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  { echo; echo '```'; echo "\$ $*"; } | tee -a "$REPORT"
  timeout -k 10 "$limit" $LINE_BUFFERED "$@" 2>&1 | tee -a "$REPORT"
  local rc=${PIPESTATUS[0]}
  local why=""
  [ "$rc" = 124 ] && why=": stopped after ${limit} s"
  [ "$rc" = 137 ] && why=": killed 10 s after its ${limit} s limit"
  [ "$rc" -gt 128 ] && [ "$rc" != 137 ] &&
    why=": killed by signal $((rc - 128))$(kill -l "$((rc - 128))" 2>/dev/null | sed 's/^/ SIG/')"
  { echo "(exit code $rc$why)"; echo '```'; } | tee -a "$REPORT"
  [ "$rc" != 0 ] && failed_steps+=("$* (exit code $rc$why)")
  return "$rc"
}
section() { printf '\n## %s\n\n%s\n' "$1" "$2" | tee -a "$REPORT"; }

# The commit of this tree, from git; in a copy without .git, the one --prepare recorded.
commit() {
  if git rev-parse --git-dir > /dev/null 2>&1; then
    echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!kernels/gpu-results.md' || echo ' (with local changes)')"
  elif [ -f "$BUILD/lib/COMMIT" ]; then
    echo "$(cat "$BUILD/lib/COMMIT") (recorded by --prepare; this copy has no .git)"
  else
    echo unknown
  fi
}

if [ "${1:-}" = --prepare ]; then
  ARCH=${ARCH:-90}
  # Not -march=native: this machine's CPU (AVX-512 on Zen 5) need not be the GPU
  # machine's, and one instruction it lacks stops every program with SIGILL.
  # x86-64-v3 (AVX2, FMA) runs on any server CPU of the last ten years.
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
    -DKVSCOPE_NATIVE=OFF -DCMAKE_CXX_FLAGS="-march=${CPU_ARCH:-x86-64-v3}" || exit 1
  cmake --build "$BUILD" -j "$(nproc)" --target kvscope kvscope_tests || exit 1
  # The libraries that are not part of the C/C++ runtime or of CUDA (which the GPU
  # machine has): Debian's PCRE2, utf8proc, OpenMP runtime, GoogleTest, ...
  mkdir -p "$BUILD/lib"
  ldd "$BUILD/kvscope" "$BUILD/kvscope_tests" | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda|libcudart|libcublas|libcublasLt|libdl|libpthread|librt)\.so' |
    xargs -r cp -L -t "$BUILD/lib"
  echo "$PWD" > "$BUILD/lib/SOURCE_DIR"  # where the programs look for the repository's files
  commit > "$BUILD/lib/COMMIT"          # the copy on the GPU machine may come without .git
  echo "prepared: $BUILD/kvscope, $BUILD/kvscope_tests, $BUILD/lib ($(ls "$BUILD/lib" | tr '\n' ' '))"
  du -ch "$BUILD/kvscope" "$BUILD/kvscope_tests" "$BUILD/lib" | tail -1
  exit 0
fi

gpu_name=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
{
  echo "# kvscope on a CUDA GPU"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- GPU (nvidia-smi: name, driver, memory): ${gpu_name:-nvidia-smi found no GPU}"
  echo "- CUDA compiler: ${nvcc:-none found} $([ -n "$nvcc" ] && "$nvcc" --version | tail -1)"
  echo "- host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, $(grep -qw avx2 /proc/cpuinfo && echo 'AVX2 (the prepared programs need it)' || echo 'NO AVX2: the prepared programs (x86-64-v3) cannot run here')"
  echo "- commit: $(commit)"
  echo "- produced by: bash kernels/gpu_check.sh (BUILD=$BUILD, JOBS=$JOBS)"
} | tee "$REPORT"

# Prebuilt programs: lead their source path to this copy, give them their libraries.
# (A copy that lost the execute bits on the way gets them back: without them the
# script would try to build here, where the packages are missing.)
chmod +x "$BUILD/kvscope_tests" "$BUILD/kvscope" 2> /dev/null
if [ -x "$BUILD/kvscope_tests" ] && [ -x "$BUILD/kvscope" ]; then
  built_in=$(cat "$BUILD/lib/SOURCE_DIR" 2>/dev/null)
  # (What the link's making says goes into the report: without it every test that reads
  # a model fails with "file not found", and the reason would be nowhere.)
  source_note=""
  if [ -n "$built_in" ] && [ "$built_in" != "$PWD" ]; then
    if [ -e "$built_in" ] && [ ! "$built_in" -ef "$PWD" ]; then
      source_note=" WARNING: $built_in already exists and is not this copy: the programs read the test models and configs there."
    elif [ ! -e "$built_in" ] && ! { mkdir -p "$(dirname "$built_in")" && ln -s "$PWD" "$built_in"; } 2>/dev/null; then
      source_note=" WARNING: could not link $built_in to this copy: the programs will not find the test models and configs."
    fi
  fi
  # The commit the programs were built from; a tree here at another commit is said.
  built_from=$(cat "$BUILD/lib/COMMIT" 2>/dev/null)
  [ -n "$built_from" ] && [ "$built_from" != "$(commit)" ] && git rev-parse --git-dir > /dev/null 2>&1 &&
    source_note="$source_note WARNING: the programs were built from $built_from, this tree is at $(commit)."

  case "$BUILD" in /*) libs="$BUILD/lib" ;; *) libs="$PWD/$BUILD/lib" ;; esac  # BUILD may be absolute
  export LD_LIBRARY_PATH="$libs:${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # CUDA's runtime and cuBLAS elsewhere (a Python wheel's nvidia/ folder, say): look for them.
  if ldd "$BUILD/kvscope_tests" | grep -q 'not found'; then
    found=$(find /usr/local /usr/lib /opt -name 'libcu*.so.13' 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
    [ -n "$found" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$found"
  fi
  # cuBLAS is opened at the first GEMM (kernels/cublas_loader.cpp), so ldd does not
  # list it: where neither the library path nor the system's cache has it, look for it.
  if ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.13' &&
    ! (IFS=:; for d in $LD_LIBRARY_PATH; do [ -e "$d/libcublas.so.13" ] && exit 0; done; exit 1); then
    found=$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
    [ -n "$found" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$found"
  fi
  section "Build" "Prebuilt on the development machine (bash kernels/gpu_check.sh --prepare), from commit ${built_from:-unknown}, built in ${built_in:-an unknown folder}, run from $PWD.$source_note"
  run 30 ldd "$BUILD/kvscope_tests"
else
  section "Build" "Release, CUDA architecture ${arch:-default (80-real 90)}; only the program and the tests."
  cmake_args=(-S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_CUDA=ON)
  [ -n "$arch" ] && cmake_args+=("-DCMAKE_CUDA_ARCHITECTURES=$arch")
  [ -n "$nvcc" ] && cmake_args+=("-DCMAKE_CUDA_COMPILER=$nvcc")
  if ! run 120 cmake "${cmake_args[@]}" || ! run 420 cmake --build "$BUILD" -j "$JOBS" --target kvscope kvscope_tests; then
    section "Stopped" "The build failed; nothing else was run."
    exit 1
  fi
fi

# A GPU test with no usable GPU fails here rather than skips (tests/gpu_test.h): a run
# in which every test skipped would otherwise read as passed.
export KVSCOPE_EXPECT_GPU=1

section "Devices" "What the build sees, with the peak memory bandwidth the benchmarks compare against."
run 30 "$BUILD/kvscope" devices

section "GPU tests" "Every kernel against its CPU operation, the model's logits on the test checkpoints and the bundled model (prefill and 32 decode steps), eviction + compaction through the engine, and batched serving steps, GPU versus CPU (tests/gpu_*_test.cpp); plus the --device option's messages."
before=$(wc -l < "$REPORT")
run 240 "$BUILD/kvscope_tests" --gtest_filter='Gpu*:DeviceOption*'
# A CUDA error such as an illegal address is sticky: once one test causes it, every
# later test in the process fails with it too. Rerun the failed tests one process
# each, the first 8 (gtest prints them in the order they ran), with launches made
# synchronous so that an error names the launch that caused it.
# A test program that crashed (a signal) printed no FAILED line for the test it was in:
# that one, the last started and never finished, is rerun too, and the report says
# that the tests after it did not run.
# (A parameterised test's line reads "[  FAILED  ] Suite/T.Name/2, where GetParam() = 2".)
failed=$(tail -n +"$((before + 1))" "$REPORT" | awk '
  /^\[ RUN      \] / {running = $NF}
  /^\[       OK \] / || /^\[  SKIPPED \] / {running = ""}
  /^\[  FAILED  \] [A-Za-z0-9_\/]+\.[A-Za-z0-9_\/]+/ {running = ""; name = $4; sub(/,$/, "", name); if (!seen[name]++) print name}
  END {if (running != "") print "CRASHED " running}')
crashed=$(echo "$failed" | awk '$1 == "CRASHED" {print $2}')
failed=$(echo "$failed" | awk '$1 != "CRASHED" && NF' | head -8)
[ -n "$crashed" ] && section "The GPU tests stopped in $crashed" "The test program died in $crashed (the exit code above says how); the tests after it did not run."
if [ -n "$failed$crashed" ]; then
  section "Failed GPU tests, one process each" "Each failed test alone (the first 8, and the one the program died in, for about 90 s in all), with CUDA_LAUNCH_BLOCKING=1: a test that passes here failed above only because an earlier test left the CUDA context broken."
  reruns_until=$((SECONDS + 90))
  for t in $crashed $failed; do
    rerun_left=$((reruns_until - SECONDS))
    if [ "$rerun_left" -lt 5 ]; then
      echo "(no rerun of $t: the reruns' 90 s are spent)" | tee -a "$REPORT"
      continue
    fi
    run $((rerun_left < 30 ? rerun_left : 30)) env CUDA_LAUNCH_BLOCKING=1 "$BUILD/kvscope_tests" --gtest_filter="$t"
  done
fi

section "Benchmarks" "Paged decode attention bandwidth and eager versus flash; compaction versus cudaMemcpy; end-to-end decode of a Qwen3-0.6B-shaped random model, alone and with 8 and 32 sequences in batched steps."
run 120 "$BUILD/kvscope" bench gpu-attention
run 60 "$BUILD/kvscope" bench gpu-compaction
run 120 "$BUILD/kvscope" bench gpu-decode

section "Serving" "Many requests through one pool on the GPU, under each memory strategy (the scheduler and policies on the host, every batched step on the GPU)."
run 120 "$BUILD/kvscope" serve-bench --device cuda --config assets/configs/qwen3-0.6b-config.json --requests 16 --prompt-len 256 --output-len 128 --repeat 1

section "Sanitizers" "The kernel tests under compute-sanitizer: racecheck (shared-memory races between a block's threads, beyond the two fixed thread orders the CPU stand-in runs) and memcheck (out-of-bounds and misaligned accesses), with what is left of the budget."
sanitizer=$(command -v compute-sanitizer || { [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" ] && echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer"; })
if [ -n "$sanitizer" ]; then
  # racecheck instruments every shared-memory access: only the kernels that share memory
  # (attention's three paths and rmsnorm's block sums), so that it fits its 90 s.
  shared_memory_tests='GpuAttention.Flash*:GpuAttention.Paged*:GpuAttention.Eager*:GpuKernels.RmsNorm*'
  # memcheck also runs one serving step whose table reads are the deepest (a long table
  # behind a short one): the CPU stand-in guards writes only, not reads.
  kernel_tests='GpuKernels*:GpuAttention*:GpuCompaction*:GpuServe.ALongTableBehindAShortOneInADecodeStep'
  run 90 "$sanitizer" --tool racecheck --error-exitcode 1 "$BUILD/kvscope_tests" --gtest_filter="$shared_memory_tests"
  run 90 "$sanitizer" --tool memcheck --error-exitcode 1 "$BUILD/kvscope_tests" --gtest_filter="$kernel_tests"
else
  echo "compute-sanitizer was not found; not run." | tee -a "$REPORT"
fi

section "Kernel profiles" "Nsight Compute's speed-of-light section (DRAM and compute throughput achieved, as a fraction of the card's peak; cold caches) for the two kernels a decode step's time should go to: paged attention over 64K cached tokens, and the bf16 GEMV of a Qwen3-0.6B-shaped model: its first 7 launches, which are the lm_head (151936 x 1024, the largest matrix) after each of the bench's two warm-up prefills, then layer 0's q, k, v, o and gate projections in the first decode step. --clock-control none leaves the clocks as the benchmarks had them. The device tool's notes record ncu reading counters on its Firecracker machines and failing under gVisor."
ncu=$(command -v ncu || { [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/ncu" ] && echo "${CUDA_HOME:-/usr/local/cuda}/bin/ncu"; })
if [ -n "$ncu" ]; then
  profile=("$ncu" --clock-control none --section SpeedOfLight)
  run 60 "${profile[@]}" --kernel-name regex:paged_attention_slice_kernel --launch-count 1 \
    "$BUILD/kvscope" bench gpu-attention --contexts 65536 --eager-contexts 1024 --calls 1
  run 60 "${profile[@]}" --kernel-name regex:matvec_kernel --launch-count 7 \
    "$BUILD/kvscope" bench gpu-decode --weights bf16 --sequences 1 --prompt-tokens 16 --decode-tokens 1
else
  echo "ncu (Nsight Compute) was not found; not run." | tee -a "$REPORT"
fi

section "Summary" "$(
  if [ ${#failed_steps[@]} = 0 ]; then echo "Every step that ran exited 0."
  else echo "Steps that failed (${#failed_steps[@]}):"; printf -- '- %s\n' "${failed_steps[@]}"; fi
  if [ ${#skipped_steps[@]} -gt 0 ]; then
    echo; echo "Steps skipped, with no budget left (${#skipped_steps[@]}):"; printf -- '- %s\n' "${skipped_steps[@]}"
  fi
)"
printf '\n(the whole run: %s s)\n' "$((SECONDS - started))" | tee -a "$REPORT"
echo "report: $REPORT"
[ ${#failed_steps[@]} = 0 ]
