// measure_read_bandwidth_gbs: how fast this machine streams memory into the cores.
//
// Decoding one token reads every weight of the model once, and does only one
// multiply-add per weight: far too little arithmetic to keep a core busy, so the
// time per token is (bytes of weights) / (read bandwidth).  This function measures
// that bandwidth, so that the matrix-vector kernels can be judged as a fraction of it.
#pragma once

#include <cstddef>

namespace kvscope {

// Sums a `bytes`-long array of floats (rounded down to whole cache lines; default
// 1 GiB, far larger than any cache) with `threads` OpenMP threads, each streaming a
// few long contiguous runs of it, and returns the best of `repeats` runs in GB/s
// (1e9 bytes/s).
// The array is written once first so its pages are mapped (an untouched page all
// reads from one shared zero page, which would be measured as a cache hit), and it is
// asked for 2 MiB transparent huge pages (madvise; hardware prefetchers stop at page
// boundaries; this probe measured no slower on 4 KiB pages on the machine this was
// written on, though decode's weights did: assets/benchmarks/bench-decode.md).  threads <= 0 means omp_get_max_threads().
// Throws kvscope::Error if the memory cannot be allocated.
double measure_read_bandwidth_gbs(std::size_t bytes = std::size_t{1} << 30, int threads = 0,
                                  int repeats = 5);

}  // namespace kvscope
