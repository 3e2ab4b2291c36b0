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


GRPO_CURVES = (("correct", "rollouts correct"), ("groups_varying", "groups whose correctness varies"),
               ("kv", "live response KV / max completion length"))


def grpo_curves(log_path: Path) -> dict[str, list[tuple[int, float]]]:
    """Per logged step, the GRPO reward's parts (`solm.train.grpo.TipReward` logs them):
    {key: [(step, value)]} for each key of `GRPO_CURVES` the log carries."""
    rows = list(read_jsonl(log_path, skip_partial_last_line=True))
    return {key: [(e["step"], e[key]) for e in rows if key in e]
            for key, _ in GRPO_CURVES if any(key in e for e in rows)}


def plot_grpo_curves(log_path: Path, png: Path) -> bool:
    """Rollout accuracy, the share of groups whose correctness varies (the groups that carry
    more than the KV term) and the live-KV term against optimizer step; False (nothing
    written) when the log has none of them."""
    curves = grpo_curves(log_path)
    if not curves:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (shares, kv) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in GRPO_CURVES:
        if key in curves:
            (kv if key == "kv" else shares).plot(*zip(*curves[key]), "o-", label=label, ms=3)
    shares.set_ylim(-0.02, 1.02)
    shares.set_ylabel("share")
    kv.set_ylabel("KV term")
    for ax in (shares, kv):
        ax.set_xlabel("optimizer step")
        ax.legend(fontsize=8)
    fig.suptitle(f"{png.parent.name}: GRPO rollouts per step")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return True
