#!/usr/bin/python3
"""Draws `kvscope serve-bench --json FILE`'s timelines as a PNG (Debian's python3-matplotlib).

    /usr/bin/python3 tutorials/08-many-requests-one-pool/plot_serve.py serve.json serve.png

Top: blocks of the pool in use after every step, one line per strategy.
Bottom: sequences in each step's batch. A strategy that frees more blocks runs
more sequences at once and so finishes the same requests in fewer steps.
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
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for i, run in enumerate(report["runs"]):
        label = (f"{run['strategy']}: {run['steps']} steps, peak {run['peak_running']} sequences, "
                 f"{run['preemptions']} preemptions")
        top.plot(run["blocks_in_use"], color=f"C{i}", lw=1.2, label=label)
        bottom.plot(run["running"], color=f"C{i}", lw=1.2)
    top.axhline(report["blocks"], color="black", lw=0.6, ls="--")
    top.set_ylabel(f"blocks in use (pool: {report['blocks']})")
    top.set_ylim(0, report["blocks"] * 1.05)
    top.legend(fontsize=8, loc="lower right")
    top.set_title(f"{report['requests']} requests of {report['prompt_len']} + {report['output_len']} tokens, "
                  f"{report['policy']} budget {report['budget']}, blocks of {report['block_size']}")
    bottom.set_ylabel("sequences in the batch")
    bottom.set_xlabel("step")
    bottom.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
