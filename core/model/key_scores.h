// TriAttention's key scores on the CPU (GPU: kernels/triattention.cu): the part of
// the TriAttention policy (evict/triattention.h) that reads the cached keys.
#pragma once

#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "model/attention.h"

namespace kvscope {

// TriAttention's key scores (evict/triattention.h): the n keys at `slots` against
// per-head vectors, in every layer:
//   raw[(l * n_heads + h) * n + i] = w[l, h] . k_i + gap[l, h] . |k_i|
// with |k_i| per rotate-half band f: sqrt(k[f]^2 + k[f + d/2]^2). Sums in double.
//   w: [layers, n_heads, head_dim]   gap: [layers, n_heads, head_dim/2]   raw: [layers, n_heads, n]
void key_scores(double* raw, const float* w, const float* gap, const std::vector<SlotRef>& slots,
                const KvStorage& kv, AttentionShape shape);

}  // namespace kvscope
