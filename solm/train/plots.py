"""Loss curves of a training run, read back from its train_log.jsonl."""

from __future__ import annotations

from pathlib import Path

from solm.core.jsonl import read_jsonl


def plot_losses(log_path: Path, png: Path, train_label: str = "train loss") -> None:
    """Train and held-out loss against optimizer step. `train_label` names a weighted
    training loss, which is not on the held-out loss's scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(e["step"], e["loss"]) for e in read_jsonl(log_path, skip_partial_last_line=True)
             if "loss" in e]
    evals = [(e["step"], e["eval_loss"]) for e in read_jsonl(log_path,
                                                             skip_partial_last_line=True)
             if "eval_loss" in e]
    if not train and not evals:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    if train:
        ax.plot(*zip(*train), label=train_label, lw=1)
    if evals:
        ax.plot(*zip(*evals), "o-", label="held-out loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (response tokens)")
    ax.set_title(f"{png.parent.name}: training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
