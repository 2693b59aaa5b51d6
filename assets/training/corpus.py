#!/usr/bin/python3
"""The training text of kvscope's bundled model: the Python 3.11 documentation.

Source: the reStructuredText sources of the Python documentation, as shipped by
Debian's `python3.11-doc` package (/usr/share/doc/python3.11/html/_sources).
Licence: the Python Software Foundation License Version 2 (documentation text;
see /usr/share/doc/python3.11/copyright). It is technical English prose with
code, with nothing offensive in it.

Left out: whatsnew/ (release notes and changelogs, mostly issue numbers).

Every file goes to exactly one split, decided by a hash of its path, so the
splits never share a document:
    heldout      (1 in 20)  evaluation text: perplexity, kvscope eval
    calibration  (1 in 20)  TriAttention calibration: apart from evaluation
    train        (the rest) tokenizer and model training
"""
import hashlib
import os
import unicodedata

ROOT = "/usr/share/doc/python3.11/html/_sources"
SKIP_DIRS = ("whatsnew",)
EOT = "<|endoftext|>"


def documents():
    """[(relative path, text)] of every document, sorted by path."""
    if not os.path.isdir(ROOT):
        raise SystemExit(f"{ROOT} not found: install Debian's python3.11-doc (apt-get install python3.11-doc)")
    out = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if os.path.relpath(os.path.join(folder, d), ROOT) not in SKIP_DIRS)
        for name in sorted(files):
            if not name.endswith(".rst.txt"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                text = unicodedata.normalize("NFC", f.read())
            out.append((os.path.relpath(path, ROOT), text))
    out.sort()
    return out


def split_of(relpath):
    """'heldout', 'calibration' or 'train' for a document path."""
    h = int(hashlib.sha1(relpath.encode()).hexdigest(), 16) % 20
    return "heldout" if h == 0 else "calibration" if h == 1 else "train"


def split(name):
    """[(path, text)] of one split."""
    return [(p, t) for p, t in documents() if split_of(p) == name]


def write(name, path, max_bytes):
    """One split as a text file, documents separated by <|endoftext|>, each cut at a
    line boundary after at most max_bytes (0 = whole documents)."""
    parts = []
    for _, text in split(name):
        if max_bytes and len(text.encode()) > max_bytes:
            text = text.encode()[:max_bytes].decode("utf-8", "ignore")
            text = text[:text.rfind("\n") + 1]
        parts.append(text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(EOT.join(parts))
    print(f"wrote {path}: {len(parts)} documents of the {name} split")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", nargs=2, metavar=("SPLIT", "FILE"), help="write one split as text")
    ap.add_argument("--max-bytes", type=int, default=0, help="cut each document after this many bytes")
    args = ap.parse_args()
    if args.write:
        write(args.write[0], args.write[1], args.max_bytes)
    else:
        for name in ("train", "calibration", "heldout"):
            docs = split(name)
            print(f"{name:12s} {len(docs):4d} files {sum(len(t.encode()) for _, t in docs) / 1e6:6.2f} MB")
