// The CPU stand-in's runtime (see cuda_device.h): memory and errors, the fiber
// scheduler that runs a launch, and the reference SGEMM behind cublas_v2.h.
#undef _FORTIFY_SOURCE  // its longjmp check refuses a jump to another stack, which is what fibers do
#include <sanitizer/asan_interface.h>  // ASAN_POISON_MEMORY_REGION: nothing without AddressSanitizer
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "cublas_v2.h"
#include "cuda_device.h"
#include "cuda_runtime_api.h"

dim3 threadIdx, blockIdx, blockDim, gridDim;

// ---- memory, devices, errors ---------------------------------------------------------------

namespace {
cudaError_t last_error = cudaSuccess;  // what the next cudaGetLastError() returns

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "cuda_on_cpu: %s\n", why.c_str());
  std::abort();
}
}  // namespace

// Each buffer cudaMalloc hands out lies between two guard zones of kGuardBytes, filled
// with kGuardByte. A kernel (or a copy) that writes up to 4 KiB before or past its buffer
// changes a guard, and the next check (after every launch, copy and free) fails, naming
// what ran. Without the zones such a write lands in the host heap: a crash at some later
// point, or none. The guard byte is not fresh memory's 0xFF: a kernel that read a NaN
// there and wrote a NaN back would leave all-ones bytes as they were. A read there
// gets floats of -1.7e38 and ints of -16,843,010.
// Under AddressSanitizer the zones are poisoned instead, so that it stops the access
// itself, with the kernel's line.
namespace {
constexpr size_t kGuardBytes = 4096;  // a multiple of cudaMalloc's 256-byte alignment
constexpr unsigned char kGuardByte = 0xFE;
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
std::map<unsigned char*, size_t> buffers;  // data pointer -> bytes asked for

// The offset of the first byte of `zone` (kGuardBytes) that is not kGuardByte; -1 if none.
long changed_byte(const unsigned char* zone) {
  for (size_t i = 0; i < kGuardBytes; ++i)
    if (zone[i] != kGuardByte) return long(i);
  return -1;
}

// Fails if a guard zone changed; `after` names what ran last ("the kernel rope_kernel").
void check_guards(const char* after) {
  if (kAddressSanitizer) return;  // the zones are poisoned: ASan has checked every access
  for (const auto& [data, bytes] : buffers) {
    const long before = changed_byte(data - kGuardBytes), past = changed_byte(data + bytes);
    if (before < 0 && past < 0) continue;
    const long at = before >= 0 ? before - long(kGuardBytes) : long(bytes) + past;
    fail(std::string(after) + " wrote " + (before >= 0 ? "before the start" : "past the end") + " of a buffer of " +
         std::to_string(bytes) + " bytes, at its byte " + std::to_string(at));
  }
}
}  // namespace

cudaError_t cudaMalloc(void** p, size_t bytes) {
  const size_t total = kGuardBytes + bytes + kGuardBytes;
  auto* base = static_cast<unsigned char*>(::operator new(total, std::align_val_t{256}, std::nothrow));
  if (!base) return cudaErrorMemoryAllocation;
  unsigned char* data = base + kGuardBytes;  // cudaMalloc aligns to 256
  std::fill_n(base, kGuardBytes, kGuardByte);
  std::fill_n(data, bytes, 0xFF);  // fresh memory is garbage: all-ones floats are NaN
  std::fill_n(data + bytes, kGuardBytes, kGuardByte);
  ASAN_POISON_MEMORY_REGION(base, kGuardBytes);
  ASAN_POISON_MEMORY_REGION(data + bytes, kGuardBytes);
  buffers[data] = bytes;
  *p = data;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  const auto it = buffers.find(static_cast<unsigned char*>(p));
  if (it == buffers.end()) fail("cudaFree of a pointer that cudaMalloc did not return, or freed twice");
  check_guards("code outside the kernels and copies");
  unsigned char* base = it->first - kGuardBytes;
  ASAN_UNPOISON_MEMORY_REGION(base, kGuardBytes + it->second + kGuardBytes);
  buffers.erase(it);
  ::operator delete(base, std::align_val_t{256});
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes) std::memmove(dst, src, bytes);
  check_guards("a cudaMemcpy");
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (bytes) std::memset(p, value, bytes);
  check_guards("a cudaMemset");
  return cudaSuccess;
}
// The stand-in's device is as big as cudaGetDeviceProperties says, and always empty:
// a request larger than it is refused by the callers' checks without allocating.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = size_t(16) << 30;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::snprintf(p->name, sizeof p->name, "CPU stand-in (tests/cuda_on_cpu), not a GPU");
  p->totalGlobalMem = size_t(16) << 30;
  p->major = 9;
  p->minor = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  // kHz, bits: a made-up 16 GB/s; a made-up L2 of 32 MiB
  *value = attr == cudaDevAttrMemoryClockRate ? 1000000 : attr == cudaDevAttrL2CacheSize ? 32 << 20 : 64;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() { return std::exchange(last_error, cudaSuccess); }
struct CUevent_st {
  std::chrono::steady_clock::time_point at;
};
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st{};
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event) {
  event->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  *ms = std::chrono::duration<float, std::milli>(stop->at - start->at).count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
  }
  return "unknown error";
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = nullptr;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, op_a == CUBLAS_OP_N ? m : k) ||
      ldb < std::max(1, op_b == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float sum = 0;
      for (int p = 0; p < k; ++p) {
        const float a = op_a == CUBLAS_OP_N ? A[i + size_t(p) * lda] : A[p + size_t(i) * lda];
        const float b = op_b == CUBLAS_OP_N ? B[p + size_t(j) * ldb] : B[j + size_t(p) * ldb];
        sum += a * b;
      }
      float& c = C[i + size_t(j) * ldc];
      c = *alpha * sum + (*beta == 0.0f ? 0.0f : *beta * c);  // beta 0: C is not read (it may be garbage)
    }
  check_guards("cublasSgemm");
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the scheduler -----------------------------------------------------------------------
//
// Each CUDA thread is a fiber: a stack of its own and a saved place to resume. A fiber
// is started once (makecontext / setcontext) and then loops: run the kernel for the
// current block, report "returned", wait to be resumed for the next block or launch.
// Switching is _setjmp / _longjmp between the stacks, which, unlike swapcontext, does
// not save and restore the signal mask: no system call, so switches cost nanoseconds.

namespace kvscope::cuda_on_cpu {
namespace {

enum class State { Runnable, AtBlockBarrier, AtWarpBarrier, Returned };

struct Thread {
  std::unique_ptr<char[]> stack;  // null until the fiber is started
  ucontext_t start;
  jmp_buf resume;
  State state = State::Runnable;
  int barriers = 0;          // __syncthreads reached in this block, the one it waits at included
  const char* at = nullptr;  // where that last __syncthreads is: "file:line"
};

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = 256 << 10;

jmp_buf scheduler;                           // where a fiber goes when it waits or returns
std::vector<Thread> threads(kMaxThreads);    // the block's threads, by linear index
int block_threads = 0;                       // threads in each block of this launch
int running = -1;                            // the thread now running, -1: the scheduler
const std::function<void()>* kernel = nullptr;
std::vector<double> offered[2];              // [2][threads] values offered in even and odd shuffles
std::vector<int> shuffles;                   // [threads] shuffles each thread has done
std::vector<unsigned char> dynamic_shared;   // extern __shared__, sized at launch

// Back to the scheduler, to be resumed here later.
void switch_to_scheduler(Thread& t) {
  if (!_setjmp(t.resume)) _longjmp(scheduler, 1);
}

void fiber_main() {
  for (;;) {
    (*kernel)();
    Thread& t = threads[size_t(running)];
    t.state = State::Returned;
    switch_to_scheduler(t);  // resumed for the next block: run the kernel again
  }
}

void run(int i) {
  Thread& t = threads[size_t(i)];
  running = i;
  threadIdx = dim3(unsigned(i) % blockDim.x, unsigned(i) / blockDim.x % blockDim.y,
                   unsigned(i) / (blockDim.x * blockDim.y));
  if (_setjmp(scheduler)) return;  // the fiber waits or has returned
  if (t.stack) _longjmp(t.resume, 1);
  t.stack.reset(new char[kStackBytes]);
  getcontext(&t.start);
  t.start.uc_stack.ss_sp = t.stack.get();
  t.start.uc_stack.ss_size = kStackBytes;
  t.start.uc_link = nullptr;  // fiber_main never returns
  makecontext(&t.start, fiber_main, 0);
  setcontext(&t.start);
}

void wait(State s) {
  if (running < 0) fail("a barrier outside a kernel");
  Thread& t = threads[size_t(running)];
  t.state = s;
  switch_to_scheduler(t);
}

std::string block_name() {
  return "block (" + std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y) + ", " +
         std::to_string(blockIdx.z) + ")";
}

std::string barrier_name(int i) {
  const Thread& t = threads[size_t(i)];
  return "thread " + std::to_string(i) + " at " + t.at + " (its __syncthreads number " + std::to_string(t.barriers) + ")";
}

// Every live thread waits at a __syncthreads. On a GPU that is one barrier only if they
// all reached the same one, the same number of times, and none has returned: a
// __syncthreads in code that some threads of the block skip is undefined behaviour
// (a hang, or threads released from different barriers). Fails unless it is one.
void check_same_barrier(int n) {
  int first = -1;
  for (int i = 0; i < n; ++i) {
    const Thread& t = threads[size_t(i)];
    if (t.state != State::AtBlockBarrier) continue;
    if (first < 0) {
      first = i;
      continue;
    }
    const Thread& f = threads[size_t(first)];
    if (t.barriers != f.barriers || std::string(t.at) != f.at)
      fail("the threads of " + block_name() + " wait at different __syncthreads: " + barrier_name(first) + ", " +
           barrier_name(i));
  }
  for (int i = 0; i < n; ++i)
    if (threads[size_t(i)].state == State::Returned)
      fail("in " + block_name() + ", thread " + std::to_string(i) + " returned while " + barrier_name(first) +
           " waits for it: every thread of a block must reach each __syncthreads");
}

// Releases the threads whose barrier everyone concerned has reached; false if none could go.
bool release_barriers(int n) {
  bool released = false;
  for (int w0 = 0; w0 < n; w0 += kWarp) {  // a warp whose every lane waits in a shuffle
    const int w1 = std::min(w0 + kWarp, n);
    int waiting = 0, returned = 0;
    for (int i = w0; i < w1; ++i) {
      waiting += threads[size_t(i)].state == State::AtWarpBarrier;
      returned += threads[size_t(i)].state == State::Returned;
    }
    if (waiting == 0 || waiting + returned < w1 - w0) continue;
    if (returned) fail("a shuffle in a warp whose other lanes have returned");
    for (int i = w0; i < w1; ++i)
      if (shuffles[size_t(i)] != shuffles[size_t(w0)]) fail("the lanes of a warp are in different shuffles");
    for (int i = w0; i < w1; ++i) threads[size_t(i)].state = State::Runnable;
    released = true;
  }
  if (released) return true;
  int at_block = 0, live = 0;  // __syncthreads: every thread that has not returned is there
  for (int i = 0; i < n; ++i) {
    at_block += threads[size_t(i)].state == State::AtBlockBarrier;
    live += threads[size_t(i)].state != State::Returned;
  }
  if (at_block == 0 || at_block != live) return false;
  check_same_barrier(n);
  for (int i = 0; i < n; ++i)
    if (threads[size_t(i)].state == State::AtBlockBarrier) threads[size_t(i)].state = State::Runnable;
  return true;
}

// The order threads and blocks run in, CUDA_ON_CPU_ORDER:
//   forward (the default)  blocks from the first; within a block, rounds in which every
//                          thread runs to its next barrier or shuffle, thread 0 first,
//                          so the warps keep in step;
//   reverse                blocks from the last; within a block, one warp at a time runs
//                          as far as it can (to a __syncthreads or its end), the last warp
//                          first, its lanes from the last: a warp races ahead of the rest.
// A read that depends on another thread's write with no barrier between them gives the
// wrong answer in one of the two, whichever way the data flows, so the tests run in both.
bool reverse_order() {
  static const bool reverse = [] {
    const char* order = std::getenv("CUDA_ON_CPU_ORDER");
    if (!order || std::string(order) == "forward") return false;
    if (std::string(order) == "reverse") return true;
    fail(std::string("CUDA_ON_CPU_ORDER is '") + order + "': forward or reverse");
  }();
  return reverse;
}

// Runs the threads that can run, in the order above, until each waits or returns.
void run_round(int n) {
  if (!reverse_order()) {
    for (int i = 0; i < n; ++i)
      if (threads[size_t(i)].state == State::Runnable) run(i);
    return;
  }
  for (int w0 = (n - 1) / kWarp * kWarp; w0 >= 0; w0 -= kWarp) {  // the last warp with a runnable lane
    bool any = false;
    for (int i = std::min(w0 + kWarp, n) - 1; i >= w0; --i)
      if (threads[size_t(i)].state == State::Runnable) {
        run(i);
        any = true;
      }
    if (any) return;
  }
}

// Rounds of run_round, each followed by opening the barriers that everyone
// concerned has reached, until every thread has returned.
void run_block(int n) {
  for (int i = 0; i < n; ++i) threads[size_t(i)].state = State::Runnable, threads[size_t(i)].barriers = 0;
  shuffles.assign(size_t(n), 0);
  for (;;) {
    run_round(n);
    running = -1;
    bool any_live = false, any_runnable = false;  // reverse runs one warp a round: others may still run
    for (int i = 0; i < n; ++i) {
      any_live |= threads[size_t(i)].state != State::Returned;
      any_runnable |= threads[size_t(i)].state == State::Runnable;
    }
    if (!any_live) return;
    if (!release_barriers(n) && !any_runnable) {
      std::string states;  // R runnable, B at __syncthreads, W in a shuffle, . returned
      for (int i = 0; i < n; ++i) states += "RBW."[int(threads[size_t(i)].state)];
      fail("deadlock in " + block_name() + ": " + states);
    }
  }
}

}  // namespace

void sync_block(const char* file, unsigned line) {
  if (running < 0) fail("a barrier outside a kernel");
  static std::map<std::pair<std::string, unsigned>, std::string> names;  // stable "file:line" strings
  const std::string base = std::string(file).substr(std::string(file).find_last_of('/') + 1);
  std::string& name = names[{base, line}];
  if (name.empty()) name = base + ":" + std::to_string(line);
  Thread& t = threads[size_t(running)];
  t.at = name.c_str();
  ++t.barriers;
  wait(State::AtBlockBarrier);
}

// One wait per shuffle: values alternate between two buffers, so a lane's next offer
// cannot overwrite one its partner has still to read (the partner reads it before it
// reaches the next shuffle, which this lane must wait for before offering again).
double shuffle_xor(unsigned mask, double x, int lane_mask) {
  const int me = running, partner = me ^ lane_mask;  // lanes of one warp differ in the low 5 bits only
  if (lane_mask < 0 || lane_mask >= kWarp || partner >= block_threads) fail("a shuffle with no partner lane");
  // This stand-in waits for every lane of the warp, as a full mask says they all come;
  // a partial mask, or a block that ends in a partial warp, is another kernel on a GPU.
  if (mask != 0xffffffffu || block_threads % kWarp != 0)
    fail("a shuffle needs the full mask and whole warps (blockDim a multiple of 32)");
  std::vector<double>& buffer = offered[shuffles[size_t(me)]++ % 2];
  buffer[size_t(me)] = x;
  wait(State::AtWarpBarrier);  // every lane of the warp has offered
  return buffer[size_t(partner)];
}

void* dynamic_shared_memory() {
  if (dynamic_shared.empty()) fail("extern __shared__ memory used, but the launch asked for none");
  return dynamic_shared.data();
}

namespace {
constexpr size_t kDefaultSharedBytes = 48 * 1024;   // dynamic shared memory a kernel gets without asking
constexpr size_t kMaxSharedBytes = 227 * 1024;      // Hopper's most per block
std::map<std::string, size_t> shared_opt_in;       // kernel name -> bytes it opted in to
}  // namespace

void launch(const char* kernel_name, dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& thread) {
  // The limits of every GPU since sm_30; dynamic shared memory as the kernel opted in to.
  const size_t n = size_t(block.x) * block.y * block.z;
  const auto opted = shared_opt_in.find(kernel_name);
  const size_t shared_limit =
      opted == shared_opt_in.end() ? kDefaultSharedBytes : std::max(opted->second, kDefaultSharedBytes);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 ||
      n == 0 || n > kMaxThreads || block.z > 64 || shared_bytes > shared_limit) {
    last_error = cudaErrorInvalidConfiguration;  // the launch does not run, as on a GPU
    return;
  }
  block_threads = int(n);
  for (std::vector<double>& buffer : offered) buffer.assign(n, 0.0);
  kernel = &thread;
  gridDim = grid;
  blockDim = block;
  const size_t blocks = size_t(grid.x) * grid.y * grid.z;
  for (size_t k = 0; k < blocks; ++k) {
    const size_t b = reverse_order() ? blocks - 1 - k : k;  // x fastest, then y, then z
    blockIdx = dim3(unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / (size_t(grid.x) * grid.y)));
    dynamic_shared.assign(shared_bytes, 0xFF);  // each block's shared memory starts as garbage (NaN floats)
    run_block(int(n));
  }
  kernel = nullptr;
  check_guards((std::string("the kernel ") + kernel_name).c_str());
}

}  // namespace kvscope::cuda_on_cpu

cudaError_t cudaFuncSetAttribute(const char* kernel_name, cudaFuncAttribute attr, int value) {
  using namespace kvscope::cuda_on_cpu;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || size_t(value) > kMaxSharedBytes)
    return cudaErrorInvalidValue;
  shared_opt_in[kernel_name] = size_t(value);
  return cudaSuccess;
}
