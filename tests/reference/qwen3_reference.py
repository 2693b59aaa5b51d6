#!/usr/bin/python3
"""A short, readable PyTorch Qwen3 decoder: the independent reference for the C++ model.

It transcribes the forward pass of Hugging Face transformers 4.51
(src/transformers/models/qwen3/modeling_qwen3.py: Qwen3RMSNorm,
Qwen3RotaryEmbedding + rotate_half/apply_rotary_pos_emb, Qwen3Attention with
repeat_kv and eager attention, Qwen3MLP, Qwen3DecoderLayer, Qwen3Model,
Qwen3ForCausalLM), written from the published algorithm, not copied.
Inference only: no dropout, no sliding window, no rope scaling, batch of one.
Everything is computed in float32; bf16/f16 checkpoints are widened to
float32 when loaded. It reads safetensors by itself (single file, or shards
through model.safetensors.index.json), so it needs only torch and numpy.

Used by make_fixtures.py; regenerate the test data with

    /usr/bin/python3 tests/reference/make_tiny_models.py && /usr/bin/python3 tests/reference/make_fixtures.py

Library use:
    model = Qwen3.load("tests/models/tiny-tied")
    logits = model.forward([1, 2, 3])        # [3, vocab_size], one row per position
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F


# ---------------------------------------------------------------- safetensors

def read_safetensors(path):
    """Return {name: float32 torch tensor} from one .safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = data[begin:end]
        dtype = info["dtype"]
        if dtype == "F32":
            arr = np.frombuffer(buf, dtype="<f4")
        elif dtype == "F16":
            arr = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dtype == "BF16":   # bf16 is the top half of a float32
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {name}: unsupported dtype {dtype}")
        out[name] = torch.from_numpy(arr.astype(np.float32).reshape(info["shape"]))
    return out


def read_checkpoint(folder):
    """All tensors of a HF model folder (sharded or not), as float32."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for fname in files:
        tensors.update(read_safetensors(os.path.join(folder, fname)))
    return tensors


# ---------------------------------------------------------------- the model

def rms_norm(x, weight, eps):
    """Qwen3RMSNorm: reduce in float32, x * rsqrt(mean(x^2) + eps), then * weight."""
    x32 = x.to(torch.float32)
    variance = x32.pow(2).mean(-1, keepdim=True)
    return weight * (x32 * torch.rsqrt(variance + eps)).to(x.dtype)


def rope_cos_sin(positions, head_dim, theta):
    """Qwen3RotaryEmbedding: cos/sin of shape [T, head_dim], in float32.

    inv_freq_i = 1 / theta^(2i/d), i = 0..d/2-1; the d/2 angles are repeated
    twice (cat(freqs, freqs)) so that dim j and j + d/2 share one angle.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]         # [T, d/2]
    emb = torch.cat((freqs, freqs), dim=-1)                          # [T, d]
    return emb.cos(), emb.sin()


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) with x1 = first half, x2 = second half of the last dim."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """x: [heads, T, d]; cos/sin: [T, d]. Pairs dim i with i + d/2 (not neighbours)."""
    return x * cos + rotate_half(x) * sin


def repeat_kv(x, n_rep):
    """[kv_heads, T, d] -> [kv_heads * n_rep, T, d]; query head h reads KV head h // n_rep."""
    if n_rep == 1:
        return x
    kv, t, d = x.shape
    return x[:, None, :, :].expand(kv, n_rep, t, d).reshape(kv * n_rep, t, d)


class Qwen3:
    def __init__(self, config, tensors):
        self.cfg = config
        self.hidden = config["hidden_size"]
        self.n_layers = config["num_hidden_layers"]
        self.n_heads = config["num_attention_heads"]
        # Fields left out take Qwen3Config's defaults (transformers), as in Hugging Face.
        self.n_kv = config.get("num_key_value_heads", 32) or self.n_heads  # null: as many as query heads
        self.head_dim = config.get("head_dim", 128)
        self.eps = config.get("rms_norm_eps", 1e-6)
        # transformers 5 keeps RoPE's base in rope_parameters, and reads it there first.
        rope = config.get("rope_parameters") or {}
        self.theta = float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
        # What this transcription does not compute must be off, as kvscope requires.
        assert rope.get("rope_type", "default") == "default" and not config.get("rope_scaling"), "RoPE scaling"
        assert config.get("partial_rotary_factor", 1) in (None, 1), "partial rotation"
        assert not config.get("attention_bias", False), "attention bias"
        assert not config.get("use_sliding_window", False), "sliding window"
        assert all(t == "full_attention" for t in config.get("layer_types") or []), "sliding-window layers"
        assert config.get("hidden_act", "silu") == "silu", "an activation other than SiLU"
        self.w = tensors
        # Qwen3ForCausalLM ties lm_head to embed_tokens when tie_word_embeddings;
        # a file may still hold an lm_head.weight, which is then ignored. Untied, it
        # must have one (Hugging Face would start it at random; kvscope refuses).
        if config.get("tie_word_embeddings", False):
            self.lm_head = tensors["model.embed_tokens.weight"]
        else:
            self.lm_head = tensors["lm_head.weight"]

    @classmethod
    def load(cls, folder):
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
        return cls(config, read_checkpoint(folder))

    def attention(self, i, x, cos, sin, cache, queries=None):
        """Qwen3Attention for layer i. x: [T, hidden] (already input-normed).

        cache: None (x is the whole sequence) or a dict {i: (K, V)} of
        post-RoPE keys and values of the earlier positions, extended here.
        queries: None or a list that gets this layer's queries after q_norm and
        before RoPE, [T, heads * head_dim] (what TriAttention calibrates on).
        """
        p = f"model.layers.{i}.self_attn."
        t = x.shape[0]
        d = self.head_dim
        q = (x @ self.w[p + "q_proj.weight"].T).view(t, self.n_heads, d)
        k = (x @ self.w[p + "k_proj.weight"].T).view(t, self.n_kv, d)
        v = (x @ self.w[p + "v_proj.weight"].T).view(t, self.n_kv, d)
        # q_norm / k_norm: RMSNorm over head_dim, per head, BEFORE RoPE.
        q = rms_norm(q, self.w[p + "q_norm.weight"], self.eps).transpose(0, 1)  # [H, T, d]
        if queries is not None:
            queries.append(q.transpose(0, 1).reshape(t, self.n_heads * d).clone())
        k = rms_norm(k, self.w[p + "k_norm.weight"], self.eps).transpose(0, 1)  # [KV, T, d]
        v = v.transpose(0, 1)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        past = 0
        if cache is not None:
            if i in cache:
                past = cache[i][0].shape[1]
                k = torch.cat((cache[i][0], k), dim=1)
                v = torch.cat((cache[i][1], v), dim=1)
            cache[i] = (k, v)
        n_rep = self.n_heads // self.n_kv
        k = repeat_kv(k, n_rep)
        v = repeat_kv(v, n_rep)
        scores = (q @ k.transpose(1, 2)) * (1.0 / math.sqrt(d))        # [H, T, past + T]
        # causal mask: query at absolute position past + a sees keys 0..past + a
        allowed = torch.ones(t, past + t, dtype=torch.bool).tril(diagonal=past)
        scores = scores.masked_fill(~allowed, float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32)
        out = (probs @ v).transpose(0, 1).reshape(t, self.n_heads * d)  # [T, H*d]
        return out @ self.w[p + "o_proj.weight"].T

    def mlp(self, i, x):
        """Qwen3MLP: down(silu(gate(x)) * up(x))."""
        p = f"model.layers.{i}.mlp."
        gate = x @ self.w[p + "gate_proj.weight"].T
        up = x @ self.w[p + "up_proj.weight"].T
        return (F.silu(gate) * up) @ self.w[p + "down_proj.weight"].T

    @torch.no_grad()
    def forward(self, ids, start_pos=0, cache=None, queries=None):
        """Logits [T, vocab] for token ids at positions start_pos .. start_pos + T - 1.

        Without a cache, ids must be the whole sequence (start_pos 0). With a
        cache dict, call it with the prompt, then with the next ids (one or a
        chunk) at the positions after the last; a chunk sees every cached row and,
        causally, itself (make_evicted_fixtures.py deletes cached rows in between).
        queries: None or a list that gets each layer's pre-RoPE queries (attention()).
        """
        ids = torch.as_tensor(ids, dtype=torch.long)
        positions = torch.arange(start_pos, start_pos + ids.shape[0])
        cos, sin = rope_cos_sin(positions, self.head_dim, self.theta)
        h = self.w["model.embed_tokens.weight"][ids]
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            # pre-norm residual blocks (Qwen3DecoderLayer)
            h = h + self.attention(i, rms_norm(h, self.w[p + "input_layernorm.weight"], self.eps),
                                   cos, sin, cache, queries)
            h = h + self.mlp(i, rms_norm(h, self.w[p + "post_attention_layernorm.weight"], self.eps))
        h = rms_norm(h, self.w["model.norm.weight"], self.eps)
        return h @ self.lm_head.T


if __name__ == "__main__":
    import sys
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "models", "tiny-tied")
    m = Qwen3.load(folder)
    logits = m.forward([1, 2, 3, 4])
    print(folder, tuple(logits.shape), "argmax per position:", logits.argmax(-1).tolist())
