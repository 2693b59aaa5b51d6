#!/usr/bin/python3
"""The bundled model's test fixture: its tokenizer and logits, from PyTorch.

    /usr/bin/python3 assets/training/make_fixture.py     # writes tests/fixtures/bundled-model.json

Tokenizer cases: texts encoded by bpe.py's Encoder (the encoder the training
data was made with); the C++ Tokenizer must give the same ids.

Logits cases (the format of tests/reference/make_fixtures.py): a prompt of
held-out text, the logits at every prompt position, then 32 greedy decode
steps, teacher-forced. They come from model.py's forward (the module the model
was trained with) on the weights as saved in assets/model (bf16, widened to
float32); the script also checks that tests/reference/qwen3_reference.py, the
transcription of Hugging Face's module, gives the same logits. The vocabulary
has 4096 entries, so each row keeps only `columns` (64 fixed random ids) to
keep the file small; greedy decoding itself is checked through decode_ids.
"""
import json
import os
import sys
import unicodedata

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import qwen3_reference  # noqa: E402
from corpus import split  # noqa: E402
from model import Qwen3  # noqa: E402
from train import load_encoder  # noqa: E402

TOKENIZER_TEXTS = [
    "Hello, world!",
    "The :func:`len` function returns the number of items of an object.",
    "   indented code:\n\n   >>> print(3 + 4)\n   7\n",
    "Numbers 12345 and 3.14159, dates 2026-11-29, hex 0xFF.",
    "Unicode: café, naïve, Straße, 日本語, emoji 🙂, e\u0301 (combining).",
    "Tabs\tand\r\nWindows newlines   trailing spaces   ",
    "it's they're we've I'm you'll he'd IT'S",
    "<|endoftext|>special tokens<|endoftext|>in text",
]
DECODE_STEPS = 32
PROMPT_LENGTHS = [16, 160]


def load(folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    model = Qwen3(config)
    tensors = qwen3_reference.read_checkpoint(folder)     # bf16 -> float32
    model.load_state_dict(tensors)
    model.eval()
    return model, config, tensors


@torch.no_grad()
def case(model, config, tensors, prompt, columns):
    ids = list(prompt)
    prefill = model(torch.tensor([ids]))[0]                            # [P, vocab]
    reference = qwen3_reference.Qwen3(config, tensors).forward(ids)   # HF transcription
    assert torch.allclose(prefill, reference, atol=1e-4), (prefill - reference).abs().max()
    decode_ids, decode_rows = [], []
    last = prefill[-1]
    for _ in range(DECODE_STEPS):
        decode_ids.append(int(last.argmax()))
        ids.append(decode_ids[-1])
        last = model(torch.tensor([ids]))[0, -1]
        decode_rows.append(last)

    def cut(row):
        return [float("%.7g" % row[c].item()) for c in columns]
    return {"prompt_ids": list(prompt), "prefill_logits": [cut(r) for r in prefill],
            "decode_ids": decode_ids, "decode_logits": [cut(r) for r in decode_rows]}


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "assets", "model")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "fixtures", "bundled-model.json")
    encoder = load_encoder(os.path.join(folder, "tokenizer.json"))
    model, config, tensors = load(folder)
    g = torch.Generator().manual_seed(4096)
    columns = sorted(torch.randperm(config["vocab_size"], generator=g)[:64].tolist())
    text = split("heldout")[0][1]
    prompt = encoder.encode(text)
    cases = [case(model, config, tensors, prompt[:n], columns) for n in PROMPT_LENGTHS]
    tokenizer_cases = [{"text": t, "nfc": unicodedata.normalize("NFC", t), "ids": encode_with_special(encoder, t)}
                       for t in TOKENIZER_TEXTS + [text[:2000]]]
    with open(out, "w") as f:
        json.dump({"model": "assets/model", "generated_by": "assets/training/make_fixture.py",
                   "columns": columns, "cases": cases, "tokenizer_cases": tokenizer_cases}, f)
    print(f"wrote {out}")


def encode_with_special(encoder, text):
    """Added tokens are cut out first (as the C++ Tokenizer and Hugging Face do)."""
    ids = []
    for k, piece in enumerate(text.split("<|endoftext|>")):
        if k:
            ids.append(encoder.special["<|endoftext|>"])
        ids.extend(encoder.encode(piece))
    return ids


if __name__ == "__main__":
    main()
