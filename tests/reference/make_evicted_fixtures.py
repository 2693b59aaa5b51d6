#!/usr/bin/python3
"""Make the fixtures that check the C++ model AFTER eviction against PyTorch.

    /usr/bin/python3 tests/reference/make_evicted_fixtures.py [--out DIR]   (default tests/fixtures)

The claim under test: an evicted token is gone, and every survivor keeps its
true position, whatever the cache does with its slots (holes, reuse of holes,
compaction). The reference cache (qwen3_reference.py) is a list of post-RoPE
keys and values in token order, so evicting a token is deleting its row, and a
new token is rotated by its true position: no slots, no blocks, nothing that
the C++ cache does. A C++ bug that numbered new tokens by the live count, read
a moved slot's old position, or masked by slot index would move the logits by
whole units (tests/model_test.cpp, ModelVsPyTorch.AfterEviction*).

For tiny-untied (two query heads per KV head) and tiny-gqa5 (five), one case:

    prompt_ids:  P = 40 ids, one prefill
    round 1:     evict 24 of the 40 prompt positions;
                 decode 12 tokens, greedy and teacher-forced (the first is the
                 argmax of the prompt's last row, computed before the eviction)
    round 2:     evict 14 of the 28 survivors (prompt and decoded tokens alike);
                 one chunk of 6 given ids in a single forward (a prompt-like
                 piece: under reuse its tokens land in holes, out of table order);
                 decode 12 more, the first the argmax of the chunk's last row

    {"model": "<variant>", "generated_by": "tests/reference/make_evicted_fixtures.py",
     "prompt_ids": [40 ints],
     "rounds": [{"evict": [positions], "chunk_ids": [ints] (round 2 only),
                 "chunk_logits": [[vocab floats] x 6] (round 2 only),
                 "decode_ids": [12 ints], "decode_logits": [[vocab floats] x 12]}, ...]}

decode_ids[s] sits at the position after the one before it (positions are never
reused: they count every token ever written). Floats as in make_fixtures.py.
The bytes depend on the CPU and its BLAS (a rerun elsewhere differs by ~1e-5,
well inside the tests' 1e-4); ids are the same everywhere.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_fixtures import MODELS_DIR, FIXTURES_DIR, bpe_vocab_size, fmt_rows  # noqa: E402
from qwen3_reference import Qwen3  # noqa: E402

VARIANTS = ["tiny-untied", "tiny-gqa5"]
PROMPT, EVICT_1, DECODE, EVICT_2, CHUNK = 40, 24, 12, 14, 6
SEED = 20261207


def evict(cache, positions, live):
    """Drop the rows of the tokens at `positions` from every layer's K and V.

    live: the positions the cache holds, in token order (row r holds live[r]);
    returns the positions left."""
    keep = [r for r, p in enumerate(live) if p not in set(positions)]
    for i, (k, v) in cache.items():  # k, v: [KV heads, rows, head_dim]
        cache[i] = (k[:, keep], v[:, keep])
    return [live[r] for r in keep]


def decode(model, cache, first_id, pos, steps):
    """Greedy, teacher-forced: feed first_id at pos, then each step's argmax."""
    ids, rows, nxt = [], [], first_id
    for s in range(steps):
        ids.append(nxt)
        row = model.forward([nxt], pos + s, cache)[0]
        rows.append(row)
        nxt = int(torch.argmax(row))
    return ids, torch.stack(rows), nxt


def make_case(model, n_bpe, g):
    prompt = torch.randint(0, n_bpe, (PROMPT,), generator=g).tolist()
    cache = {}
    prefill = model.forward(prompt, 0, cache)                   # [P, vocab]
    live = list(range(PROMPT))

    # Round 1: evict among the prompt, then decode.
    evict_1 = sorted(torch.randperm(PROMPT, generator=g)[:EVICT_1].tolist())
    live = evict(cache, evict_1, live)
    ids_1, rows_1, nxt = decode(model, cache, int(torch.argmax(prefill[-1])), PROMPT, DECODE)
    live += list(range(PROMPT, PROMPT + DECODE))
    pos = PROMPT + DECODE

    # Round 2: evict among every survivor, a chunk at once, then decode.
    pick = torch.randperm(len(live), generator=g)[:EVICT_2].tolist()
    evict_2 = sorted(live[r] for r in pick)
    live = evict(cache, evict_2, live)
    chunk = torch.randint(0, n_bpe, (CHUNK,), generator=g).tolist()
    chunk_rows = model.forward(chunk, pos, cache)                # [CHUNK, vocab]
    pos += CHUNK
    ids_2, rows_2, _ = decode(model, cache, int(torch.argmax(chunk_rows[-1])), pos, DECODE)
    rounds = [{"evict": evict_1, "decode_ids": ids_1, "decode": rows_1},
              {"evict": evict_2, "chunk_ids": chunk, "chunk": chunk_rows, "decode_ids": ids_2, "decode": rows_2}]
    return prompt, rounds


def check_case(name, model, prompt, rounds):
    """Checks on the reference itself: with nothing evicted, its cached decode and a
    chunk on its cache equal the uncached forward (the cache it slices is the cache
    it reads), and the eviction moves the first decode row (it is not a no-op)."""
    cache = {}
    model.forward(prompt, 0, cache)
    ids, rows, _ = decode(model, cache, rounds[0]["decode_ids"][0], len(prompt), DECODE)
    full = model.forward(prompt + ids)[len(prompt):]
    diff = float((rows - full).abs().max())
    assert diff < 1e-4, f"{name}: cached decode differs from recompute by {diff}"
    # A chunk on a cache (round 2's path) agrees with the uncached forward too.
    chunk = rounds[1]["chunk_ids"]
    cache = {}
    model.forward(prompt, 0, cache)
    chunk_rows = model.forward(chunk, len(prompt), cache)
    full = model.forward(prompt + chunk)[len(prompt):]
    diff = float((chunk_rows - full).abs().max())
    assert diff < 1e-4, f"{name}: a chunk on the cache differs from recompute by {diff}"
    moved = float((rows[0] - rounds[0]["decode"][0]).abs().max())
    assert moved > 1e-2, f"{name}: evicting {EVICT_1} tokens changed no logit ({moved})"
    return moved


def write(path, name, prompt, rounds):
    parts = []
    for r in rounds:
        fields = ['"evict": ' + json.dumps(r["evict"])]
        if "chunk_ids" in r:
            fields.append('"chunk_ids": ' + json.dumps(r["chunk_ids"]))
            fields.append('"chunk_logits": ' + fmt_rows(r["chunk"].to(torch.float32)))
        fields.append('"decode_ids": ' + json.dumps(r["decode_ids"]))
        fields.append('"decode_logits": ' + fmt_rows(r["decode"].to(torch.float32)))
        parts.append("  {" + ",\n   ".join(fields) + "}")
    text = ('{"model": ' + json.dumps(name) + ",\n"
            ' "generated_by": "tests/reference/make_evicted_fixtures.py",\n'
            ' "prompt_ids": ' + json.dumps(prompt) + ",\n"
            ' "rounds": [\n' + ",\n".join(parts) + "]}\n")
    json.loads(text)  # well-formed
    with open(path, "w") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=FIXTURES_DIR, help="folder for <variant>-evicted.json")
    out = parser.parse_args().out
    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(SEED)
    for name in VARIANTS:
        folder = os.path.join(MODELS_DIR, name)
        model = Qwen3.load(folder)
        prompt, rounds = make_case(model, bpe_vocab_size(folder), g)
        moved = check_case(name, model, prompt, rounds)
        path = os.path.join(out, name + "-evicted.json")
        write(path, name, prompt, rounds)
        print(f"{name}: evicted {rounds[0]['evict'][:4]}... then {rounds[1]['evict'][:4]}...; "
              f"the first decode row moved {moved:.2f} by eviction; wrote {path}")


if __name__ == "__main__":
    main()
