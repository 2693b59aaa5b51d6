#!/usr/bin/python3
"""The training loss curve of assets/model/training.json as a PNG (python3-matplotlib).

    /usr/bin/python3 assets/training/plot_loss.py assets/model/training.json assets/model/loss.png
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
        t = json.load(f)
    loss = t["loss"]
    k = 20   # moving average over k steps
    smooth = [sum(loss[max(0, i - k + 1):i + 1]) / len(loss[max(0, i - k + 1):i + 1]) for i in range(len(loss))]
    long_from = int(t["args"]["long_from"] * len(loss))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(range(1, len(loss) + 1), loss, color="C0", alpha=0.25, lw=0.8, label="loss per step")
    ax.plot(range(1, len(loss) + 1), smooth, color="C0", lw=1.6, label=f"mean of {k} steps")
    ax.axvline(long_from, color="gray", ls="--", lw=0.8)
    ax.text(long_from, max(loss) * 0.9, f" windows of {t['args']['long_seq']} tokens", color="gray")
    ax.axhline(__import__("math").log(t["heldout_perplexity"]), color="C3", lw=1,
               label=f"held-out: perplexity {t['heldout_perplexity']:.1f}")
    ax.set_xlabel("step (4,096 tokens each)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_ylim(0, max(loss) * 1.02)
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
