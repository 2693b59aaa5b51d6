#!/usr/bin/python3
"""Qwen3 as a trainable PyTorch module, batched, with Hugging Face's tensor names.

The same computation as tests/reference/qwen3_reference.py (the transcription
of transformers' modeling_qwen3.py that the C++ model is tested against), but
batched and with parameters, so it can be trained. state_dict() names match
Hugging Face's ("model.layers.0.self_attn.q_proj.weight", ...), so the saved
safetensors load in kvscope unchanged.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_cos_sin(T, head_dim, theta):
    """cos, sin: [T, head_dim]; dim i and i + d/2 share the angle pos * theta^(-2i/d)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.arange(T).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.kv, self.d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        hidden = c["hidden_size"]
        self.q_proj = nn.Linear(hidden, self.h * self.d, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv * self.d, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, hidden, bias=False)
        self.q_norm = RMSNorm(self.d, c["rms_norm_eps"])   # per head, before RoPE
        self.k_norm = RMSNorm(self.d, c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask, probs=None):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.h, self.d)).transpose(1, 2)    # [B, h, T, d]
        k = self.k_norm(self.k_proj(x).view(B, T, self.kv, self.d)).transpose(1, 2)   # [B, kv, T, d]
        v = self.v_proj(x).view(B, T, self.kv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # GQA: query head j reads KV head j // rep. Group the rep query heads of each
        # KV head into one [rep * T, d] matrix, so K and V are never copied.
        rep = self.h // self.kv
        q = q.reshape(B * self.kv, rep * T, self.d)
        k = k.reshape(B * self.kv, T, self.d)
        v = v.reshape(B * self.kv, T, self.d)
        # scores = q k^T / sqrt(d) + causal mask, in one call: [B * kv, rep * T, T]
        scores = torch.baddbmm(mask.repeat(rep, 1), q, k.transpose(1, 2), alpha=self.d ** -0.5)
        p = scores.softmax(-1)
        if probs is not None:
            probs.append(p.detach().view(B, self.h, T, T))
        y = (p @ v).view(B, self.h, T, self.d).transpose(1, 2).reshape(B, T, self.h * self.d)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden, inter = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask, probs=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, probs)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    """Qwen3Model: the part named "model." in the checkpoint."""

    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Qwen3(nn.Module):
    """Qwen3ForCausalLM with tied embeddings: logits = norm(h) @ embed_tokens^T."""

    def __init__(self, c):
        super().__init__()
        assert c["tie_word_embeddings"]
        self.c = c
        self.model = Body(c)

    def forward(self, ids, probs=None):
        """ids: [B, T] -> logits [B, T, vocab]. probs: a list that receives each layer's [B, h, T, T]."""
        T = ids.shape[1]
        cos, sin = rope_cos_sin(T, self.c["head_dim"], float(self.c["rope_theta"]))
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask, probs)
        return self.model.norm(x) @ self.model.embed_tokens.weight.T
