#!/usr/bin/python3
"""Make the tiny random-weight Qwen3 checkpoints that the C++ tests load.

Regenerate models and fixtures (Debian's python3: torch 1.13 CPU + numpy;
no `safetensors`, `transformers` or `tokenizers` package is needed):

    /usr/bin/python3 tests/reference/make_tiny_models.py && /usr/bin/python3 tests/reference/make_fixtures.py

Writes tests/models/<variant>/ in the exact Hugging Face folder format:
config.json, generation_config.json, tokenizer.json and model.safetensors
(or two shards + model.safetensors.index.json). Everything is deterministic
(fixed seeds, no timestamps), so a rerun gives byte-identical files.

Variants (all share the same tokenizer.json; all but tiny-gqa5 share the same
shapes and, except for lm_head, the same weights):
    tiny-tied            F32, tie_word_embeddings true, no lm_head.weight in the file
    tiny-untied          F32, tie false, lm_head.weight different from the embedding
    tiny-tied-with-head  F32, tie true, the file also holds an lm_head.weight (tiny-untied's,
                         not the embedding), which tying ignores
    tiny-bf16-sharded    BF16, untied, two shards + model.safetensors.index.json
    tiny-f16             F16, tied
    tiny-gqa5            F32, untied, 10 query heads over 2 KV heads (a group
                         of 5, as in Qwen3-14B), head_dim 64; its own weights;
                         rms_norm_eps 0.05 (the others' 1e-6, as every Qwen3's,
                         is too small to show: a forward pass that ignored the
                         config's eps passed every fixture)

Shapes: hidden 64, intermediate 160, 2 layers, 4 query heads, 2 KV heads,
head_dim 32 (deliberately != hidden / heads = 16, so code that derives
head_dim from hidden_size fails), max_position_embeddings 512, vocab_size =
tokenizer size rounded up to a multiple of 16 (Qwen pads its vocab too, so
the last few rows belong to no token). tiny-gqa5 has 10 query heads and
head_dim 64 instead.

Weight scales are chosen so that every part of the forward pass shows in the
logits (HF's initializer_range 0.02 would make a random model's layers
vanish next to the embedding, and its logits all near zero):
  * v/gate/up projections use std 1/sqrt(fan_in) and o_proj/down_proj
    3/sqrt(fan_in), so each attention/MLP block adds a vector a few times
    larger than the embedding (std 0.4): the layers dominate the logits, and
    the tied models do not just predict their input token again and again;
  * q_proj/k_proj use std 0.3 as asked, but q_norm/k_norm rescale q and k
    per head anyway, so it is the q_norm/k_norm weights (about 1.6) that make
    the attention peaky: scores q.k/sqrt(32) then have a spread of about 2.5;
  * other norm weights are 1 + 0.1*randn; the untied lm_head has std 0.3;
    logits then spread over several units (row std about 2-3, max about 13).
"""
import json
import os
import re
import struct
from collections import Counter

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS_DIR = os.path.normpath(os.path.join(HERE, "..", "models"))

HIDDEN = 64
INTERMEDIATE = 160
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
MAX_POS = 512
NUM_MERGES = 120          # "a couple of hundred" trimmed to keep the fixtures small
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # Qwen's order

# The exact pre-tokenizer split pattern of Qwen2/Qwen3's tokenizer.json.
QWEN_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Approximation of QWEN_SPLIT_REGEX for Python's `re`, which has no \p{L} or
# \p{N}: a letter is [^\W\d_] and a number is \d. It is used ONLY to
# pre-tokenize the training text below (plain ASCII English, where the two
# agree); the C++ tokenizer implements the real pattern above.
_L = r"[^\W\d_]"
_N = r"\d"
_NOT_CRLF_L_N = r"(?:[^\r\n\w]|_)"
_NOT_SPACE_L_N = r"(?:[^\s\w]|_)"
TRAIN_SPLIT_RE = re.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    rf"|{_NOT_CRLF_L_N}?{_L}+"
    rf"|{_N}"
    rf"| ?{_NOT_SPACE_L_N}+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+")

# Training text for the tiny BPE (written for this project).
TRAINING_TEXT = """\
A language model reads a prompt one token at a time and writes down, for every
layer, a key and a value for each token it has seen. Those keys and values are
the cache. When the next token arrives, its query looks back over the cache,
and the attention weights say which of the earlier tokens matter right now.

The cache grows with the text. A short chat needs only a few megabytes, but a
long document of 32768 tokens can fill most of the memory that is left on the
card once the weights are loaded. That's why serving engines keep the cache in
pages: fixed blocks of 16 slots, a table per sequence that maps logical blocks
to physical ones, and a pool that hands out free blocks and takes them back.

Eviction throws away the tokens that seem least important. The trouble is that
important tokens are scattered through the text, so the holes they leave are
scattered too. A block can only return to the pool when every one of its slots
is empty, and with random holes that almost never happens. We'll see that the
memory we hoped to free stays pinned, block by block.

Compaction slides the surviving tokens forward, in order, so the tail blocks
become empty and can be given back. Each key keeps the position it had when it
was written; the rotation applied to it is never undone, and the next query
still sees the right distances. It's a simple idea, and it's the point of the
whole exercise: count the blocks you give back, not the tokens you throw away.

Questions to try: What happens if the window is 128 tokens and the budget is
1024? Which heads keep the first 4 tokens? Does the answer change when the
prompt is a list, a poem, or a table of numbers like 3.14, 2.72 and 1.41?
"""


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character map.

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to
    chr(256 + n) in byte order. Dict order is the order GPT-2 and Qwen give
    the 256 byte tokens ids 0..255 ("!" is 0, "Ġ" for space is 220).
    """
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train_bpe(text, num_merges):
    """A plain byte-level BPE trainer: repeatedly merge the most frequent pair.

    Ties are broken by the pair's strings (smallest first), so the result is
    deterministic. Returns (vocab {token: id}, merges [(a, b)]).
    """
    byte_map = bytes_to_unicode()
    vocab = {ch: i for i, ch in enumerate(byte_map.values())}
    words = Counter()
    for piece in TRAIN_SPLIT_RE.findall(text):
        words[tuple(byte_map[b] for b in piece.encode("utf-8"))] += 1
    words = dict(words)
    merges = []
    while len(merges) < num_merges:
        pairs = Counter()
        for word, count in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        best_count = max(pairs.values())
        best = min(p for p, c in pairs.items() if c == best_count)
        merges.append(best)
        merged = best[0] + best[1]
        if merged not in vocab:   # (HF's trainer also reuses an existing id)
            vocab[merged] = len(vocab)
        new_words = {}
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + count
        words = new_words
    return vocab, merges


def make_tokenizer_json():
    vocab, merges = train_bpe(TRAINING_TEXT, NUM_MERGES)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False,
                  "trim_offsets": False, "use_regex": False}
    added = [{"id": len(vocab) + i, "content": tok, "single_word": False,
              "lstrip": False, "rstrip": False, "normalized": False, "special": True}
             for i, tok in enumerate(SPECIAL_TOKENS)]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN_SPLIT_REGEX},
                 "behavior": "Isolated", "invert": False},
                dict(byte_level),
            ],
        },
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[a, b] for a, b in merges],
        },
    }
    special_ids = {a["content"]: a["id"] for a in added}
    return tok, len(vocab) + len(added), special_ids


def make_weights(vocab_size, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, seed=1234):
    """Float32 master weights, shapes [out, in]; lm_head is the untied head."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * std

    def norm_weight(n, mean=1.0, std=0.1):
        return mean + randn(n, std=std)

    w = {"model.embed_tokens.weight": randn(vocab_size, HIDDEN, std=0.4)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm_weight(HIDDEN)
        w[p + "self_attn.q_proj.weight"] = randn(heads * head_dim, HIDDEN, std=0.3)
        w[p + "self_attn.k_proj.weight"] = randn(kv_heads * head_dim, HIDDEN, std=0.3)
        w[p + "self_attn.v_proj.weight"] = randn(kv_heads * head_dim, HIDDEN, std=HIDDEN ** -0.5)
        w[p + "self_attn.o_proj.weight"] = randn(HIDDEN, heads * head_dim, std=3 * (heads * head_dim) ** -0.5)
        w[p + "self_attn.q_norm.weight"] = norm_weight(head_dim, mean=1.6, std=0.3)
        w[p + "self_attn.k_norm.weight"] = norm_weight(head_dim, mean=1.6, std=0.3)
        w[p + "post_attention_layernorm.weight"] = norm_weight(HIDDEN)
        w[p + "mlp.gate_proj.weight"] = randn(INTERMEDIATE, HIDDEN, std=HIDDEN ** -0.5)
        w[p + "mlp.up_proj.weight"] = randn(INTERMEDIATE, HIDDEN, std=HIDDEN ** -0.5)
        w[p + "mlp.down_proj.weight"] = randn(HIDDEN, INTERMEDIATE, std=3 * INTERMEDIATE ** -0.5)
    w["model.norm.weight"] = norm_weight(HIDDEN)
    w["lm_head.weight"] = randn(vocab_size, HIDDEN, std=0.3)
    return w


SAFETENSORS_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:          # numpy has no bfloat16: reinterpret the bits
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors):
    """Write {name: tensor} in the safetensors format, names sorted."""
    header = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name]
        data = tensor_bytes(t)
        header[name] = {"dtype": SAFETENSORS_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    return offset


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


# (query heads, KV heads, head_dim) of every variant but tiny-gqa5.
SHARED_HEADS = (HEADS, KV_HEADS, HEAD_DIM)
# tiny-gqa5: five query heads per KV head (Qwen3-14B's 40/8) and head_dim 64.
# In the shared shape, heads / kv_heads = kv_heads = 2, so code that mixed up
# the group size and the KV head count would still pass there.
GQA5_HEADS = (10, 2, 64)
# RMSNorm's eps of tiny-gqa5: near the mean square of its rows (about 0.2 in the
# residual stream, about 1 in q and k), so that the eps read from config.json shows.
GQA5_RMS_NORM_EPS = 0.05

VARIANTS = [
    # name, dtype, tie_word_embeddings, lm_head in file, sharded, heads
    ("tiny-tied", torch.float32, True, False, False, SHARED_HEADS),
    ("tiny-untied", torch.float32, False, True, False, SHARED_HEADS),
    ("tiny-tied-with-head", torch.float32, True, True, False, SHARED_HEADS),
    ("tiny-bf16-sharded", torch.bfloat16, False, True, True, SHARED_HEADS),
    ("tiny-f16", torch.float16, True, False, False, SHARED_HEADS),
    ("tiny-gqa5", torch.float32, False, True, False, GQA5_HEADS),
]
TORCH_DTYPE_NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def main():
    tok, tokenizer_size, special = make_tokenizer_json()
    vocab_size = (tokenizer_size + 15) // 16 * 16
    master = {SHARED_HEADS: make_weights(vocab_size),
              GQA5_HEADS: make_weights(vocab_size, *GQA5_HEADS, seed=5)}
    eos = [special["<|im_end|>"], special["<|endoftext|>"]]

    for name, dtype, tied, head_in_file, sharded, heads in VARIANTS:
        n_heads, n_kv_heads, head_dim = heads
        out = os.path.join(MODELS_DIR, name)
        os.makedirs(out, exist_ok=True)
        for f in os.listdir(out):             # no stale shards from an older layout
            if f.endswith(".safetensors") or f.endswith(".index.json"):
                os.remove(os.path.join(out, f))
        w = {k: v.to(dtype) for k, v in master[heads].items()}
        if tied and not head_in_file:
            del w["lm_head.weight"]   # with head_in_file it stays: the untied head, ignored when tied

        config = {
            "architectures": ["Qwen3ForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": special["<|endoftext|>"],
            "eos_token_id": special["<|im_end|>"],
            "head_dim": head_dim,
            "hidden_act": "silu",
            "hidden_size": HIDDEN,
            "initializer_range": 0.02,
            "intermediate_size": INTERMEDIATE,
            "max_position_embeddings": MAX_POS,
            "max_window_layers": LAYERS,
            "model_type": "qwen3",
            "num_attention_heads": n_heads,
            "num_hidden_layers": LAYERS,
            "num_key_value_heads": n_kv_heads,
            "rms_norm_eps": GQA5_RMS_NORM_EPS if heads == GQA5_HEADS else 1e-06,
            "rope_scaling": None,
            "rope_theta": 1000000,
            "sliding_window": None,
            "tie_word_embeddings": tied,
            "torch_dtype": TORCH_DTYPE_NAME[dtype],
            "transformers_version": "4.51.0",
            "use_cache": True,
            "use_sliding_window": False,
            "vocab_size": vocab_size,
        }
        write_json(os.path.join(out, "config.json"), config)
        write_json(os.path.join(out, "generation_config.json"), {
            "bos_token_id": special["<|endoftext|>"],
            "do_sample": False,
            "eos_token_id": eos,
            "pad_token_id": special["<|endoftext|>"],
            "transformers_version": "4.51.0",
        })
        write_json(os.path.join(out, "tokenizer.json"), tok)

        if sharded:
            # Shard 1: embedding + layer 0; shard 2: layer 1, final norm, lm_head.
            first = {k: v for k, v in w.items()
                     if k.startswith("model.embed_tokens.") or k.startswith("model.layers.0.")}
            second = {k: v for k, v in w.items() if k not in first}
            files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
            total, weight_map = 0, {}
            for fname, part in zip(files, [first, second]):
                total += write_safetensors(os.path.join(out, fname), part)
                weight_map.update({k: fname for k in part})
            write_json(os.path.join(out, "model.safetensors.index.json"),
                       {"metadata": {"total_size": total},
                        "weight_map": dict(sorted(weight_map.items()))})
        else:
            write_safetensors(os.path.join(out, "model.safetensors"), w)

    print(f"tokenizer: {tokenizer_size} tokens "
          f"({tokenizer_size - len(special)} BPE + {len(special)} added), "
          f"config vocab_size {vocab_size}; special ids {special}")
    print(f"wrote {', '.join(v[0] for v in VARIANTS)} under {MODELS_DIR}")


if __name__ == "__main__":
    main()
