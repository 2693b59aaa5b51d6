#!/usr/bin/python3
"""Make the logits fixtures that the C++ model tests compare against.

Regenerate models and fixtures (Debian's python3: torch 1.13 CPU + numpy):

    /usr/bin/python3 tests/reference/make_tiny_models.py && /usr/bin/python3 tests/reference/make_fixtures.py

For every tests/models/<variant>/ this runs the PyTorch reference
(qwen3_reference.py, loading the checkpoint from disk) and writes
tests/fixtures/<variant>.json:

    {"model": "<variant>",
     "generated_by": "tests/reference/make_fixtures.py",
     "cases": [{"prompt_ids":     [P ints],
                "prefill_logits": [[vocab_size floats] x P],   # row t: logits at prompt position t
                "decode_ids":     [32 ints],
                "decode_logits":  [[vocab_size floats] x 32]}, # row s: logits after feeding decode_ids[s]
               ...]}

Two cases per model: P = 7 and P = 23, ids drawn from a fixed seed among the
BPE tokens (no added/special tokens, no padding ids). Decoding is greedy and
teacher-forced: decode_ids[0] = argmax(prefill_logits[P-1]) and
decode_ids[s] = argmax(decode_logits[s-1]); decode_ids[s] sits at position
P + s. A test feeds the recorded ids (it does not have to agree on argmax
ties). Every logit row is a full forward over the whole sequence so far (no
cache); a KV-cached decode is checked against it below. Floats are float32
values written as repr() of the float64 rounded to 9 significant digits.

And tests/fixtures/tiny-tied-queries.json, the queries TriAttention calibrates
on (after q_norm, before RoPE) for tiny-tied's first prompt:

    {"model": "tiny-tied", "generated_by": ..., "prompt_ids": [P ints],
     "queries": [[[heads * head_dim floats] x P] x layers]}

Before writing, the script checks: logits spread (std > 0.5), causality
(changing later tokens leaves earlier rows unchanged), cached decode ==
full recompute, and tiny-tied == tiny-tied-with-head bit for bit.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from qwen3_reference import Qwen3  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MODELS_DIR = os.path.join(ROOT, "tests", "models")
FIXTURES_DIR = os.path.join(ROOT, "tests", "fixtures")
VARIANTS = ["tiny-tied", "tiny-untied", "tiny-tied-with-head", "tiny-bf16-sharded", "tiny-f16", "tiny-gqa5"]
PROMPT_LENGTHS = [7, 23]
DECODE_STEPS = 32
SEED = 20240607


def bpe_vocab_size(folder):
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        return len(json.load(f)["model"]["vocab"])


def make_prompts(n_bpe):
    g = torch.Generator().manual_seed(SEED)
    return [torch.randint(0, n_bpe, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def run_case(model, prompt):
    prefill = model.forward(prompt)                     # [P, vocab]
    seq = list(prompt)
    decode_ids, decode_rows = [], []
    last = prefill[-1]
    for _ in range(DECODE_STEPS):
        nxt = int(torch.argmax(last))
        seq.append(nxt)
        decode_ids.append(nxt)
        last = model.forward(seq)[-1]                   # full recompute, independent of any cache
        decode_rows.append(last)
    return {"prompt_ids": list(prompt), "prefill": prefill,
            "decode_ids": decode_ids, "decode": torch.stack(decode_rows)}


def check_case(name, model, case):
    prompt, ids = case["prompt_ids"], case["decode_ids"]
    allrows = torch.cat((case["prefill"], case["decode"]))
    std = float(allrows.std(dim=-1).min())
    assert std > 0.5, f"{name}: logits too flat (min row std {std:.3f})"
    # Causality: replace every token after position c; rows 0..c must not move.
    # (Same shapes, so the masked terms add exact zeros: the rows must be equal.)
    prefill = case["prefill"]
    c = len(prompt) // 2
    other = prompt[:c + 1] + [(t + 1) % len(model.lm_head) for t in prompt[c + 1:]]
    changed = model.forward(other)
    assert torch.equal(prefill[:c + 1], changed[:c + 1]), f"{name}: not causal"
    assert float((prefill[c + 1:] - changed[c + 1:]).abs().max()) > 1e-2, \
        f"{name}: later tokens do not matter at all?"
    full = model.forward(prompt + ids)
    # A KV-cached decode agrees with the full recompute.
    cache = {}
    rows = [model.forward(prompt, 0, cache)]
    for s, t in enumerate(ids):
        rows.append(model.forward([t], len(prompt) + s, cache))
    cached = torch.cat(rows)
    diff = float((cached - full).abs().max())
    assert diff < 1e-4, f"{name}: cached decode differs from recompute by {diff}"
    # The fixture rows are the rows of one full forward over prompt + decode ids.
    diff2 = float((allrows - full).abs().max())
    assert diff2 < 1e-4, f"{name}: fixture rows differ from one full forward by {diff2}"
    return std, diff


def fmt(x):
    return repr(float("%.9g" % float(x)))


def fmt_rows(rows):
    return "[\n" + ",\n".join("    [" + ",".join(fmt(v) for v in row.tolist()) + "]"
                              for row in rows) + "]"


def write_fixture(path, name, cases):
    parts = []
    for c in cases:
        parts.append(
            '  {"prompt_ids": ' + json.dumps(c["prompt_ids"]) + ",\n"
            '   "prefill_logits": ' + fmt_rows(c["prefill"].to(torch.float32)) + ",\n"
            '   "decode_ids": ' + json.dumps(c["decode_ids"]) + ",\n"
            '   "decode_logits": ' + fmt_rows(c["decode"].to(torch.float32)) + "}")
    text = ('{"model": ' + json.dumps(name) + ",\n"
            ' "generated_by": "tests/reference/make_fixtures.py",\n'
            ' "cases": [\n' + ",\n".join(parts) + "]}\n")
    json.loads(text)   # well-formed
    with open(path, "w") as f:
        f.write(text)


def write_queries_fixture(path, name, model, prompt):
    queries = []
    model.forward(prompt, queries=queries)             # [layers] x [P, heads * head_dim]
    layers = ",\n".join(" " + fmt_rows(q.to(torch.float32)) for q in queries)
    text = ('{"model": ' + json.dumps(name) + ",\n"
            ' "generated_by": "tests/reference/make_fixtures.py",\n'
            ' "prompt_ids": ' + json.dumps(list(prompt)) + ",\n"
            ' "queries": [\n' + layers + "]}\n")
    json.loads(text)   # well-formed
    with open(path, "w") as f:
        f.write(text)


def main():
    torch.set_num_threads(1)   # one summation order: two runs on one machine write the same bytes
    # (on another CPU or BLAS the logits may differ by ~1e-5, well inside the tests' 1e-4;
    # the ids are the same)
    os.makedirs(FIXTURES_DIR, exist_ok=True)
    results = {}
    for name in VARIANTS:
        folder = os.path.join(MODELS_DIR, name)
        model = Qwen3.load(folder)
        prompts = make_prompts(bpe_vocab_size(folder))
        cases = [run_case(model, p) for p in prompts]
        for k, case in enumerate(cases):
            std, diff = check_case(f"{name} case {k}", model, case)
            print(f"{name} case {k}: prompt {len(case['prompt_ids'])}, min row std {std:.2f}, "
                  f"cache vs recompute {diff:.1e}, decode ids {case['decode_ids']}")
        write_fixture(os.path.join(FIXTURES_DIR, name + ".json"), name, cases)
        if name == "tiny-tied":
            write_queries_fixture(os.path.join(FIXTURES_DIR, name + "-queries.json"), name, model, prompts[0])
        results[name] = cases

    # Tied with and without a stored lm_head.weight: the same model exactly.
    for a, b in zip(results["tiny-tied"], results["tiny-tied-with-head"]):
        assert torch.equal(a["prefill"], b["prefill"]) and torch.equal(a["decode"], b["decode"]), \
            "tiny-tied and tiny-tied-with-head differ"
    # Low-precision variants stay close to their float32 twins (same master weights).
    for low, ref in [("tiny-f16", "tiny-tied"), ("tiny-bf16-sharded", "tiny-untied")]:
        d = max(float((x["prefill"] - y["prefill"]).abs().max())
                for x, y in zip(results[low], results[ref]))
        print(f"{low} vs {ref}: max prefill logit difference {d:.3f} (rounding of the weights)")
    print(f"wrote {len(VARIANTS)} fixtures and tiny-tied-queries.json to {FIXTURES_DIR}")


if __name__ == "__main__":
    main()
