#!/usr/bin/python3
"""Trains kvscope's bundled model: a tiny Qwen3 on the Python documentation.

    /usr/bin/python3 assets/training/train.py            # about an hour on 2 cores

Reads assets/model/tokenizer.json's merges (made by bpe.py), tokenizes the
train split of corpus.py, trains with AdamW on random windows of --seq tokens
(seeded: the same command gives the same weights on the same machine), and
writes to assets/model/:
    config.json          Hugging Face Qwen3 config
    model.safetensors    the weights in bf16 (the C++ loader reads them as stored)
    training.json        the command, the loss curve, the held-out perplexity and,
                         every 50 steps, the most attention any head of each layer
                         gives position 0 (first_token_attention: where a sink shows)

The options beyond the defaults (--init, --rope-theta, --bos, --weight-decay) are
those of the attention-sink experiments recorded in assets/model/README.md.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe import Encoder, byte_to_char  # noqa: E402
from corpus import EOT, split  # noqa: E402
from model import Qwen3  # noqa: E402

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 4095,
    "eos_token_id": 4095,
    "head_dim": 32,
    "hidden_act": "silu",
    "hidden_size": 128,
    "initializer_range": 0.02,
    "intermediate_size": 384,
    "max_position_embeddings": 2048,
    "max_window_layers": 4,
    "model_type": "qwen3",
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 4096,
}


def load_encoder(path):
    """The Encoder of a tokenizer.json written by bpe.py."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    to_byte = {c: b for b, c in byte_to_char().items()}
    vocab = doc["model"]["vocab"]
    tokens = [None] * len(vocab)
    for name, i in vocab.items():
        tokens[i] = bytes(to_byte[c] for c in name)
    merges = [(vocab[a], vocab[b]) for a, b in doc["model"]["merges"]]
    special = {a["content"]: a["id"] for a in doc["added_tokens"]}
    return Encoder(merges, tokens, special)


def token_stream(encoder, docs):
    """All documents' ids, each followed by <|endoftext|>, as one int64 tensor."""
    ids = []
    for _, text in docs:
        ids.extend(encoder.encode(text))
        ids.append(encoder.special[EOT])
    return torch.tensor(ids, dtype=torch.int64)


def windows(stream, starts, seq, bos=None):
    """x, y: [len(starts), seq], y one token ahead of x: x = stream[s:s + seq].
    With a bos id, x is the BOS and then stream[s:s + seq - 1], and y = stream[s:s + seq]
    (the window's first text token is predicted from the BOS alone)."""
    if bos is None:
        return (torch.stack([stream[s:s + seq] for s in starts]),
                torch.stack([stream[s + 1:s + seq + 1] for s in starts]))
    y = torch.stack([stream[s:s + seq] for s in starts])
    x = torch.cat([torch.full((len(starts), 1), bos, dtype=torch.int64), y[:, :-1]], dim=1)
    return x, y


def save_safetensors(path, tensors):
    """{name: float tensor} -> a safetensors file in bf16 (round to nearest even)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.bfloat16).contiguous()
        raw = t.view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def init_weights(model, std):
    for name, p in model.named_parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=std)
            if name.endswith(("o_proj.weight", "down_proj.weight")):   # residual branches, GPT-2 style
                p.data /= math.sqrt(2 * model.c["num_hidden_layers"])


@torch.no_grad()
def first_token_attention(model, stream, seq, bos, n=4, skip=128):
    """Per layer, the largest share of attention that any head gives position 0, over
    queries at positions [skip, seq) of n held-out windows. A head attending evenly
    gives it 1 / (position + 1): 0.2% for seq 1024, skip 128. A sink gives it far more."""
    model.eval()
    x, _ = windows(stream, [i * ((len(stream) - seq) // n) for i in range(n)], seq, bos)
    probs = []
    model(x, probs)
    model.train()
    return [p[:, :, skip:, 0].mean(dim=(0, 2)).max().item() for p in probs]   # p: [B, h, T, T]


@torch.no_grad()
def perplexity(model, stream, seq, batch, bos):
    """exp(mean next-token loss) over consecutive windows of `seq` tokens (each after the BOS, if one)."""
    model.eval()
    n = (len(stream) - 1) // seq
    losses = []
    for i in range(0, n, batch):
        x, y = windows(stream, [r * seq for r in range(i, min(n, i + batch))], seq, bos)
        logits = model(x)
        losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item())
    model.train()
    return math.exp(sum(losses) / (n * seq))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1400)
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per step")
    ap.add_argument("--seq", type=int, default=256, help="tokens per window, for most steps")
    ap.add_argument("--long-seq", type=int, default=1024, help="tokens per window in the last steps (the context)")
    ap.add_argument("--long-from", type=float, default=0.85, help="fraction of the steps after which windows are long")
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1, help="AdamW's, on the matrices (not on norms)")
    ap.add_argument("--rope-theta", type=float, default=CONFIG["rope_theta"])
    ap.add_argument("--bos", action="store_true", help="start every window with <|endoftext|> (an experiment: "
                    "kvscope's prompts get it only if tokenizer.json's template adds it)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--init", help="a model folder to continue training from (its weights, not its optimiser state)")
    ap.add_argument("--out", default="assets/model")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    encoder = load_encoder(os.path.join(args.out, "tokenizer.json"))
    train = token_stream(encoder, split("train"))
    heldout = token_stream(encoder, split("heldout"))
    bos = encoder.special[EOT] if args.bos else None
    config = dict(CONFIG, rope_theta=args.rope_theta)
    print(f"train {len(train):,} tokens, held-out {len(heldout):,} tokens", flush=True)

    model = Qwen3(config)
    if args.init:
        with open(os.path.join(args.init, "config.json")) as f:
            theirs = json.load(f)
        differ = [k for k in config if k != "torch_dtype" and theirs.get(k) != config[k]]
        if differ:
            raise SystemExit(f"--init {args.init}: its config differs in {', '.join(differ)}")
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/reference"))
        from qwen3_reference import read_checkpoint
        model.load_state_dict(read_checkpoint(args.init))
        print(f"continuing from {args.init}", flush=True)
    else:
        init_weights(model, config["initializer_range"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{n_params:,} parameters", flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 20)
    gen = torch.Generator().manual_seed(args.seed)
    curve, sink_curve, start = [], [], time.time()
    for step in range(1, args.steps + 1):
        lr = args.lr * min(step / warmup, 0.1 + 0.45 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        seq = args.seq if step <= args.long_from * args.steps else args.long_seq
        x, y = windows(train, torch.randint(0, len(train) - seq - 1, (args.tokens // seq,), generator=gen), seq, bos)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        curve.append(round(loss.item(), 4))
        if step % 50 == 0 or step == 1:
            sink = first_token_attention(model, heldout, args.long_seq, bos)
            sink_curve.append([step] + [round(a, 4) for a in sink])
            print("        most attention on position 0, per layer: " + " ".join(f"{a:5.1%}" for a in sink), flush=True)
        if step % 10 == 0 or step == 1:
            el = time.time() - start
            print(f"step {step:5d}/{args.steps}  loss {loss.item():.3f}  lr {lr:.2e}  "
                  f"{el / 60:5.1f} min  {step * args.tokens / el:,.0f} tok/s", flush=True)

    minutes = (time.time() - start) / 60
    tensors = {k: v for k, v in model.state_dict().items()}
    save_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    # Perplexity of the weights as saved (bf16), which is what kvscope runs.
    for k, v in tensors.items():
        v.copy_(v.to(torch.bfloat16).float())
    ppl = perplexity(model, heldout, args.long_seq, 4, bos)
    print(f"held-out perplexity {ppl:.2f} ({minutes:.1f} min of training)", flush=True)
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump({"command": "/usr/bin/python3 assets/training/train.py " + " ".join(sys.argv[1:]),
                   "args": vars(args), "parameters": n_params, "train_tokens": len(train),
                   "heldout_tokens": len(heldout), "minutes": round(minutes, 1),
                   "heldout_perplexity": round(ppl, 3), "loss": curve,
                   "first_token_attention": sink_curve}, f)


if __name__ == "__main__":
    main()
