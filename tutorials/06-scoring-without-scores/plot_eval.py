#!/usr/bin/python3
"""Draws `kvscope eval --json FILE`'s numbers as a PNG (Debian's python3-matplotlib).

    /usr/bin/python3 tutorials/06-scoring-without-scores/plot_eval.py eval.json eval.png

Top: perplexity against the full cache, per policy and kept fraction.
Bottom: blocks freed, holes only (solid) in front of compacted (light, behind).
"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        report = json.load(f)
    rows = report["rows"]
    full = rows[0]["perplexity"]
    policies = list(dict.fromkeys(r["policy"] for r in rows[1:]))
    keeps = sorted({r["keep"] for r in rows[1:]})
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    width = 0.8 / len(keeps)
    for k, keep in enumerate(keeps):
        xs = [i + (k - (len(keeps) - 1) / 2) * width for i in range(len(policies))]
        pick = [next(r for r in rows if r["policy"] == p and r["keep"] == keep) for p in policies]
        top.bar(xs, [100 * (r["perplexity"] / full - 1) for r in pick], width, label=f"keep {keep:.0%}")
        bottom.bar(xs, [100 * r["blocks_freed_compact"] for r in pick], width, color=f"C{k}", alpha=0.35)
        bottom.bar(xs, [100 * r["blocks_freed_holes"] for r in pick], width, color=f"C{k}")
    top.set_ylabel("perplexity vs full cache (%)")
    top.axhline(0, color="black", lw=0.6)
    top.legend()
    top.set_title(f"{report['windows']} held-out windows of {report['context']} tokens, "
                  f"blocks of {report['block_size']}")
    bottom.set_ylabel("blocks freed (%)\nsolid: holes only, light: compacted")
    bottom.set_ylim(0, 100)
    bottom.set_xticks(range(len(policies)))
    bottom.set_xticklabels(policies)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
