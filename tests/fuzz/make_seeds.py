#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into tests/fuzz/corpus/ (committed).

Small, valid inputs of every reader, so the fuzzer starts from files that get
past the first checks. Rerun after changing a format: python3 tests/fuzz/make_seeds.py
It overwrites its own files and leaves the others: the inputs that once crashed a
target are kept in the corpus, by hand, as regression seeds.
"""
import json
import pathlib
import struct

here = pathlib.Path(__file__).resolve().parent
root = here.parent.parent
corpus = here / "corpus"


def write(target, name, data):
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] -> the file's bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def seeds_safetensors():
    f32 = struct.pack("<6f", 1, 2, 3, -4, 0.5, 1e-3)
    bf16 = struct.pack("<4H", 0x3F80, 0x4000, 0xBF80, 0x0000)
    f16 = struct.pack("<2H", 0x3C00, 0x4000)
    write("safetensors", "two_tensors", safetensors(
        [("model.norm.weight", "F32", [2, 3], f32), ("lm_head.weight", "BF16", [4], bf16)], {"format": "pt"}))
    write("safetensors", "f16_scalar_and_empty", safetensors(
        [("a", "F16", [2], f16), ("b", "F32", [], struct.pack("<f", 7)), ("c", "BF16", [0, 5], b"")]))
    write("safetensors", "no_tensors", safetensors([], {}))


def seeds_config():
    write("config", "tiny-tied.json", (root / "tests/models/tiny-tied/config.json").read_text())
    write("config", "qwen3-0.6b.json", (root / "assets/configs/qwen3-0.6b-config.json").read_text())
    write("config", "minimal.json", json.dumps({
        "model_type": "qwen3", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 10,
        "eos_token_id": [1, 2], "rope_scaling": None}))
    # Fields each in range whose products are not: K/V bytes per token wrapped to 0.
    write("config", "huge-sizes.json", json.dumps({
        "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2**30,
        "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 2**20, "vocab_size": 64}))


def seeds_tokenizer():
    write("tokenizer_load", "tiny.json", (root / "tests/models/tiny-tied/tokenizer.json").read_text())
    # A hand-made one: four letters, merges in both spellings, a GPT-2 style pre-tokenizer.
    write("tokenizer_load", "handmade.json", json.dumps({
        "added_tokens": [{"id": 9, "content": "<|end|>", "special": True}],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]},
        "pre_tokenizer": {"type": "ByteLevel", "use_regex": True},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "\u0120": 3, "ab": 4, "abc": 5, "\u0120a": 6},
                  "merges": ["a b", ["ab", "c"], "\u0120 a"]}}))
    # The bundled model's shape of post-processor: ByteLevel, then a BOS template.
    tiny = json.loads((root / "tests/models/tiny-tied/tokenizer.json").read_text())
    bos = tiny["added_tokens"][0]
    tiny["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": bos["content"], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "special_tokens": {bos["content"]: {"id": bos["content"], "ids": [bos["id"]], "tokens": [bos["content"]]}}}]}
    write("tokenizer_load", "bos-template.json", json.dumps(tiny))
    for name, text in [("ascii", "Hello, world! It's 2024.\n\tcode: x = f(y) + 1"),
                       ("chat", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
                       ("unicode", "caf\u00e9 cafe\u0301 \u4f60\u597d \U0001F600 \u00a0\u2003end"),
                       ("numbers", "3.14159 1,000,000 0x1F")]:
        write("tokenizer_encode", name, text)
    write("tokenizer_encode", "invalid_utf8", b"ok \xff\xfe \xc3 \xed\xa0\x80 \xf4\x90\x80\x80")


def record(kind, seq, block=-1, slot=-1, from_block=-1, from_slot=-1, pos=-1):
    return struct.pack("<BBhhiiiq", kind, 0, slot, from_slot, seq, block, from_block, pos)


def seeds_trace():
    # Two sequences in 4 blocks of 2 slots: writes, a round with an eviction and a
    # move, then a release. Kinds: 0 allocated, 1 freed, 2 written, 3 evicted,
    # 4 moved, 5 round begin, 6 round end.
    ev = [record(0, 0, 0), record(2, 0, 0, 0, pos=0), record(2, 0, 0, 1, pos=1),
          record(0, 0, 1), record(2, 0, 1, 0, pos=2),
          record(0, 1, 2), record(2, 1, 2, 0, pos=0),
          record(5, 0, pos=3), record(3, 0, 0, 0, pos=0), record(4, 0, 0, 0, 1, 0, pos=2),
          record(1, 0, 1), record(6, 0, pos=2),
          record(3, 1, 2, 0, pos=0), record(1, 1, 2)]
    header = (f"kvscope-trace 1 block_size=2 num_blocks=4 strategy=compact events={len(ev)} policy=random source=a%20b"
              " tokens.0=785,2038,4688 tokens.1=11\n")  # the token ids generate lists
    write("trace", "small_run", header.encode() + b"".join(ev))
    # The same run with a model to read its token ids (the fuzzers run from the
    # repository's root): kvscope-viz shows their text.
    write("trace", "small_run_with_text", header.replace(" tokens.0", " model=tests/models/tiny-tied tokens.0")
          .replace("785,2038,4688", "78,203,46").encode() + b"".join(ev))
    write("trace", "empty", b"kvscope-trace 1 block_size=16 num_blocks=1 strategy=holes events=0\n")


def seeds_calibration():
    # The bundled model's calibration (4 layers x 4 heads x 16 bands), and the smallest
    # shape a file can declare: 1 layer, 1 head, head_dim 2 (one band).
    write("calibration", "bundled-model.json", (root / "assets/model/triattention-calibration.json").read_text())
    write("calibration", "one-band.json", json.dumps({
        "format": "kvscope.triattention.calibration", "version": 1,
        "model": {"num_layers": 1, "num_heads": 1, "num_kv_heads": 1, "head_dim": 2, "hidden_size": 2,
                  "rope_theta": 10000.0, "path": "m"},
        "text": {"path": "t.txt", "tokens": 3, "chunk": 3},
        "qbar_re": [[[0.5]]], "qbar_im": [[[-0.25]]], "q_abs_mean": [[[0.75]]]}))


if __name__ == "__main__":
    seeds_safetensors()
    seeds_config()
    seeds_tokenizer()
    seeds_trace()
    seeds_calibration()
    for d in sorted(corpus.iterdir()):
        print(d.name, sorted(p.name for p in d.iterdir()))
