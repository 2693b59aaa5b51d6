#!/usr/bin/env python3
"""Shows that the CPU stand-in's tests can fail: breaks the CUDA code one way at a
time, rebuilds kvscope_gpu_tests_on_cpu, runs it, and puts each file back.

    python3 tests/cuda_on_cpu/break_kernels.py [BUILD_DIR]     (default: build; about 20 min on 2 cores)

Prints one line per breakage with the tests that failed; exits 1 if some breakage
failed no test. The sources are restored even when it is interrupted, and the
target is rebuilt from them at the end.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (file, text, broken text, what breaks)
BREAKAGES = [
    ("kernels/flash_attention.cu", "    }\n    __syncthreads();\n\n    // 5.", "    }\n\n    // 5.",
     "flash attention: the barrier between steps 4 and 5 removed"),
    ("kernels/flash_attention.cu",
     "  CUDA_CHECK(cudaFuncSetAttribute(flash_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));\n",
     "", "flash attention: no opt-in to more than 48 KiB of shared memory (head_dim 128 needs 50.7 KiB)"),
    ("kernels/flash_attention.cu", "      }\n    }\n    __syncthreads();\n\n    // 5.", "      }\n      __syncthreads();\n    }\n\n    // 5.",
     "flash attention: the barrier after step 4 inside the branch that only the first kQueryTile threads take"),
    ("kernels/paged_attention.cu", "  // Merge the block's warps.", "  if (m == -INFINITY) return;\n  // Merge the block's warps.",
     "paged attention: a warp that saw no key returns before the block's barrier"),
    ("kernels/common.cuh", "x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));",
     "x = fmaxf(x, __shfl_xor_sync(0x0000ffffu, x, offset));", "warp_max: a shuffle mask of half the warp"),
    ("kernels/flash_attention.cu", "if (p >= 0 && p <= query_pos[r]) {", "if (p >= 0) {",
     "flash attention: no causal mask"),
    ("kernels/flash_attention.cu", "for (int r = 0; r < kQueryTile; ++r) last_query = max(last_query, query_pos[r]);",
     "last_query = query_pos[0];", "flash attention: key tiles skipped by the block's first query, not its latest"),
    ("kernels/flash_attention.cu", "    if (!any_visible) continue;", "    if (!any_visible) break;",
     "flash attention: the walk stops at a key tile wholly in the future (a reused hole's past lies after it)"),
    ("kernels/paged_attention.cu", "if (p < 0 || p > p_query) continue;", "if (p < 0) continue;",
     "paged attention: no causal mask"),
    ("kernels/paged_attention.cu", "for (int s = 0; s < n_slices; ++s)\n      if (part[s * (hd + 2)] > -INFINITY) sum",
     "for (int s = 0; s + 1 < n_slices; ++s)\n      if (part[s * (hd + 2)] > -INFINITY) sum",
     "paged attention: the last slice left out of the merge"),
    ("kernels/common.cuh", "offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);\n  return x;\n}\n__device__ __forceinline__ double",
     "offset > 1; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);\n  return x;\n}\n__device__ __forceinline__ double",
     "warp_sum: the last butterfly round dropped"),
    ("kernels/common.cuh", "  x = warp_max(x);\n  __syncthreads();\n  return x;", "  x = warp_max(x);\n  return x;",
     "block_max: no barrier before its scratch is reused (eager softmax's block_sum overwrites it)"),
    ("kernels/rmsnorm.cu", "sum_sq = block_sum(sum_sq, scratch);", "sum_sq = warp_sum(sum_sq);",
     "rmsnorm: each warp's sum instead of the block's"),
    ("kernels/rope.cu", "v[i + half] = b * c + a * s;", "v[i + half] = b * c - a * s;",
     "rope: the wrong sign"),
    ("kernels/matvec.cu", "sum[b] += bf16_lo(p.x) * u.x + bf16_hi(p.x) * u.y", "sum[b] += bf16_hi(p.x) * u.x + bf16_lo(p.x) * u.y",
     "matvec: two bf16 halves swapped"),
    ("kernels/matvec.cu", "const float4 v = x4[size_t(b) * chunks + i];", "const float4 v = x4[i];",
     "matvec: every vector of a batch multiplied as the first"),
    ("kernels/paged_kv.cuh", "const int start = kv.row_start[t];", "const int start = 0;",
     "row tables: every row of a batch reads from the start of the tables"),
    ("kernels/eager_attention.cu", "prob_sums[row_sums[t] + size_t(h) * n + j] +=", "prob_sums[row_sums[0] + size_t(h) * n + j] +=",
     "eager attention: every decoding row's probabilities added to the first row's sums"),
    ("kernels/eager_attention.cu", "for (int t = sum_from; t < T; ++t) s +=", "for (int t = sum_from + 1; t < T; ++t) s +=",
     "eager attention: the first summed query left out"),
    ("kernels/triattention.cu", "double(gh[f]) * sqrt(re * re + im * im)", "double(gh[f]) * (re * re + im * im)",
     "TriAttention: |k_f| squared"),
    ("kernels/compaction.cu", "rows[size_t(to[m0 + b]) * vecs + c] = held[b];", "rows[size_t(to[m0 + b]) * vecs + c] = held[n - 1 - b];",
     "compaction: a batch of moves written to the wrong slots"),
    ("kernels/cuda_backend.cpp", "  rope(k_new_.get(), q_pos_.get(), inv_freq_.get(), T, c.num_kv_heads, hd);\n", "",
     "CudaBackend: keys not rotated"),
    ("kernels/cuda_backend.cpp", "block_table_.get() + p.table_offset / block_size_, slot_pos_.get() + p.table_offset,",
     "block_table_.get(), slot_pos_.get(),", "CudaBackend: every sequence of a batch attends through the first one's table"),
    ("kernels/cuda_backend.cpp", "eager_max_slots_, block_size_, row_start_.get() + first, row_slots_.get() + first};",
     "eager_max_slots_, block_size_, row_start_.get(), row_slots_.get()};",
     "CudaBackend: the eager decode rows read the paged rows' tables"),
    ("kernels/cuda_backend.cpp", "last_row[i] = int(tokens.size()) - 1;", "last_row[i] = int(tokens.size() - it.tokens.size());",
     "CudaBackend: a prefill chunk's logits gathered from its first row, not its last"),
    ("kernels/elementwise.cu", "  if (i < n) x[i] += y[i];", "  if (i <= n) x[i] += y[i];",
     "add_inplace: the bound off by one (writes x[n])"),
    ("kernels/compaction.cu", "const size_t columns = size_t(num_layers) * 2 * (vec4",
     "const size_t columns = size_t(num_layers) * (vec4", "compaction: the grid sized for K's columns only"),
    ("kernels/flash_attention.cu", "any_visible |= key_pos[jj] >= 0 && key_pos[jj] <= last_query;",
     "any_visible |= key_pos[jj] >= 0 && key_pos[jj] < last_query;",
     "flash attention: a key tile skipped when its only visible key is the latest query's own"),
    ("kernels/cuda_backend.cpp", "q_pos_.get() + first, n, kv,", "q_pos_.get(), n, kv,",
     "CudaBackend: the eager decode rows masked by the paged rows' positions"),
    ("kernels/cuda_backend.cpp", "paged_max_slots_ = std::max(paged_max_slots_, row_slots[paged_rows_]);",
     "paged_max_slots_ = std::max(paged_max_slots_, row_slots[0]);",
     "CudaBackend: the paged launch sized by the first decode row's table"),
    ("kernels/cuda_backend.cpp", "embed(h_.get(), x_.get(), WeightType::F32, last_rows_.get(), n, d);",
     "embed(h_.get(), x_.get(), embed_.type, last_rows_.get(), n, d);",
     "CudaBackend: a batch's last rows gathered as if the activations had the weights' dtype"),
    # One thread too many, past each kernel's bound: caught by the guard zones around
    # every buffer (runtime.cpp) where the write lands outside the buffer.
    ("kernels/compaction.cu", "if (col >= size_t(num_layers) * 2 * vecs) return;",
     "if (col > size_t(num_layers) * 2 * vecs) return;", "compaction: one column past the last"),
    ("kernels/eager_attention.cu", "  if (j >= kv.table_slots) return;", "  if (j > kv.table_slots) return;",
     "eager attention: scores for one slot past the table"),
    ("kernels/eager_attention.cu", "  if (j >= n) return;\n", "  if (j > n) return;\n",
     "eager attention: probabilities and sums for one key past the last"),
    ("kernels/matvec.cu", "if (row >= rows) return;", "if (row > rows) return;", "matvec: one row past the last"),
    ("kernels/rope.cu", "if (idx >= size_t(T) * n_heads * half) return;",
     "if (idx > size_t(T) * n_heads * half) return;", "rope: one pair past the last"),
    ("kernels/triattention.cu", "  if (i >= n) return;", "  if (i > n) return;", "TriAttention: one key past the last"),
]

FILTER = "GpuKernels*:GpuAttention*:GpuCompaction*:GpuModel.TiedF32*:GpuModel.Bf16*:GpuServe*"


def build(build_dir):
    return subprocess.run(["cmake", "--build", build_dir, "-j", "2", "--target", "kvscope_gpu_tests_on_cpu"],
                          cwd=ROOT, capture_output=True, text=True)


def failed_tests(build_dir, order):
    run = subprocess.run([os.path.join(build_dir, "kvscope_gpu_tests_on_cpu"), "--gtest_filter=" + FILTER,
                          "--gtest_brief=1"], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, CUDA_ON_CPU_ORDER=order))
    names = {line.split()[3] for line in run.stdout.splitlines() if line.startswith("[  FAILED  ]") and "(" in line}
    stand_in = [line for line in run.stderr.splitlines() if line.startswith("cuda_on_cpu: ")]  # its fail() message
    return run.returncode, sorted(names), stand_in[:1]


def main():
    build_dir = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build")
    missed = 0
    for path, text, broken, what in BREAKAGES:
        full = os.path.join(ROOT, path)
        original = open(full).read()
        if original.count(text) != 1:
            print(f"{what}: the text to break is not in {path} once; update break_kernels.py")
            missed += 1
            continue
        try:
            with open(full, "w") as f:
                f.write(original.replace(text, broken))
            b = build(build_dir)
            if b.returncode:
                print(f"{what}: does not build\n{b.stdout[-2000:]}{b.stderr[-2000:]}")
                missed += 1
                continue
            # The threads in step first; one warp racing ahead (ctest's cuda-on-cpu-reverse:) only if that passes.
            order = "forward"
            rc, names, stand_in = failed_tests(build_dir, order)
            if rc == 0:
                order = "reverse"
                rc, names, stand_in = failed_tests(build_dir, order)
            if rc == 0:
                verdict = "NOT CAUGHT"
            elif names:
                verdict = f"caught ({order} order) by " + ", ".join(names)
            else:  # stopped before gtest's summary: the stand-in's fail() (a guard zone, a barrier) or a crash
                verdict = f"caught ({order} order): the test program stopped with exit code {rc} before its summary"
                verdict += "".join(f" ({line})" for line in stand_in)
            print(f"{what}: {verdict}", flush=True)
            missed += rc == 0
        finally:
            with open(full, "w") as f:
                f.write(original)
    build(build_dir)
    print(f"{len(BREAKAGES) - missed} of {len(BREAKAGES)} breakages caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
