#!/usr/bin/python3
"""A byte-level BPE tokenizer, trained from scratch and saved as a Hugging Face
tokenizer.json with Qwen3's normaliser (NFC) and pre-tokenizer (its split regex
followed by GPT-2's byte-to-character map), so kvscope's C++ Tokenizer loads it
unchanged.

Training (Sennrich et al. 2016, on bytes as in GPT-2):
  1. split the text into words with the pre-tokenizer regex and count them;
  2. start from the 256 single bytes;
  3. repeatedly merge the most frequent adjacent pair of symbols (ties: the
     pair whose symbol ids are smallest), counting pairs inside words only,
     until the vocabulary has the requested size.

    /usr/bin/python3 assets/training/bpe.py --vocab 4096 --out assets/model/tokenizer.json
"""
import argparse
import collections
import json
import unicodedata

import regex  # Debian's python3-regex: \p{L} and \p{N}, as the Rust tokenizers crate has

from corpus import EOT, split

# Qwen2/Qwen3's split pattern, exactly as in their tokenizer.json.
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLIT = regex.compile(PATTERN)


def byte_to_char():
    """GPT-2's map from the 256 bytes to printable characters (space -> 'Ġ', '\\n' -> 'Ċ')."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def words(texts):
    """Counter of pre-tokenized words (as bytes) over all texts."""
    counts = collections.Counter()
    for text in texts:
        counts.update(w.encode("utf-8") for w in SPLIT.findall(text))
    return counts


def train(texts, vocab_size, n_special):
    """Merges [(left id, right id)] and token bytes [bytes per id] for a vocabulary of vocab_size ids."""
    counts = words(texts)
    tokens = [bytes([b]) for b in range(256)]
    seqs = [list(w) for w in counts]              # each word as a list of ids
    freq = list(counts.values())
    pairs = collections.Counter()                 # (a, b) -> occurrences, weighted by word frequency
    where = collections.defaultdict(set)          # (a, b) -> words that contain it
    for i, s in enumerate(seqs):
        for p in zip(s, s[1:]):
            pairs[p] += freq[i]
            where[p].add(i)
    merges = []
    while len(tokens) < vocab_size - n_special:
        best = max(pairs.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]), default=None)
        if best is None or best[1] < 2:
            break
        (a, b), _ = best
        new = len(tokens)
        tokens.append(tokens[a] + tokens[b])
        merges.append((a, b))
        for i in list(where[(a, b)]):
            s = seqs[i]
            for p in zip(s, s[1:]):               # take the word's old pairs out ...
                pairs[p] -= freq[i]
                if pairs[p] <= 0:
                    del pairs[p]
                where[p].discard(i)
            out, j = [], 0
            while j < len(s):
                if j + 1 < len(s) and s[j] == a and s[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(s[j])
                    j += 1
            seqs[i] = out
            for p in zip(out, out[1:]):           # ... and its new ones in
                pairs[p] += freq[i]
                where[p].add(i)
        del where[(a, b)]
    return merges, tokens


class Encoder:
    """Encodes text with the trained merges (the same steps as the C++ Tokenizer)."""

    def __init__(self, merges, tokens, special):
        self.rank = {pair: r for r, pair in enumerate(merges)}
        self.merged = {pair: 256 + r for r, pair in enumerate(merges)}
        self.special = special                     # text -> id
        self.cache = {}

    def word(self, w):
        ids = self.cache.get(w)
        if ids is None:
            ids = list(w)
            while len(ids) > 1:
                ranked = [(self.rank.get(p, 1 << 30), k) for k, p in enumerate(zip(ids, ids[1:]))]
                r, k = min(ranked)
                if r == 1 << 30:
                    break
                ids[k:k + 2] = [self.merged[(ids[k], ids[k + 1])]]
            self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in SPLIT.findall(unicodedata.normalize("NFC", text)):
            out.extend(self.word(w.encode("utf-8")))
        return out


def tokenizer_json(merges, tokens, special):
    """The Hugging Face tokenizer.json document."""
    chars = byte_to_char()
    name = ["".join(chars[b] for b in t) for t in tokens]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for s, i in special.items()],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {n: i for i, n in enumerate(name)},
                  "merges": [[name[a], name[b]] for a, b in merges]},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=4096, help="vocabulary size, special tokens included")
    ap.add_argument("--out", default="assets/model/tokenizer.json")
    args = ap.parse_args()
    texts = [t for _, t in split("train")]
    merges, tokens = train(texts, args.vocab, n_special=1)
    special = {EOT: len(tokens)}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(merges, tokens, special), f, ensure_ascii=False, indent=1)
    print(f"wrote {args.out}: {len(tokens)} tokens ({len(merges)} merges) + {len(special)} special")


if __name__ == "__main__":
    main()
