#!/usr/bin/python3
"""Make tests/fixtures/rope-long.json: RoPE at long positions, by the reference.

    /usr/bin/python3 tests/reference/make_rope_fixture.py [--out DIR]   (default tests/fixtures)

The model fixtures reach position 191 at most; Qwen3 runs to 40,960. Hugging Face
computes the angle position x inv_freq in float32 (qwen3_reference.rope_cos_sin),
so at position 40,959 its angles differ from exact ones by up to ~2e-3 radians.
kvscope must rotate as Hugging Face does, not more exactly. One seeded vector of
2 heads x 128 dims (Qwen3's head_dim), rotated at each position for theta 1e6
(Qwen3's) and 1e4 (Hugging Face's default):

    {"generated_by": ..., "head_dim": 128, "heads": 2, "x": [256 floats],
     "cases": [{"theta": t, "pos": p, "rotated": [256 floats]}, ...]}
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_fixtures import FIXTURES_DIR, fmt  # noqa: E402
from qwen3_reference import apply_rope, rope_cos_sin  # noqa: E402

HEADS, HEAD_DIM = 2, 128
POSITIONS = [0, 1, 1000, 4095, 32767, 40959, 131071]
THETAS = [1000000.0, 10000.0]


def floats(t):
    return "[" + ",".join(fmt(v) for v in t.reshape(-1).tolist()) + "]"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=FIXTURES_DIR, help="folder for rope-long.json")
    out = parser.parse_args().out
    g = torch.Generator().manual_seed(20261207)
    x = torch.randn(HEADS, 1, HEAD_DIM, generator=g)          # [heads, T = 1, d]
    cases = []
    for theta in THETAS:
        for pos in POSITIONS:
            cos, sin = rope_cos_sin(torch.tensor([pos]), HEAD_DIM, theta)
            rotated = floats(apply_rope(x, cos, sin))
            cases.append('  {"theta": %s, "pos": %d, "rotated": %s}' % (repr(theta), pos, rotated))
    text = ('{"generated_by": "tests/reference/make_rope_fixture.py",\n'
            ' "head_dim": %d, "heads": %d,\n "x": %s,\n "cases": [\n%s]}\n'
            % (HEAD_DIM, HEADS, floats(x), ",\n".join(cases)))
    json.loads(text)  # well-formed
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "rope-long.json")
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {len(cases)} rotations to {path}")


if __name__ == "__main__":
    main()
