"""What solm's runtimes implement of a model's attention, read from its config.

The runtimes run their own attention kernels (`solm.engines.torch.attention`,
`solm.engines.torch.paged_attention`) over shared KV pools. They implement plain causal-LM attention
with GQA, q/k norms (the model's own modules) and Gemma-2's attention softcap. A sliding
window is implemented only where it cannot bind: a request whose prompt and cap together
stay within the window reads exactly what the model's own forward would; a longer one is
refused by name rather than decoded wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


def sliding_window(config) -> int | None:
    """The window of the model's sliding-window layers; None when no layer slides."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return int(window) if "sliding_attention" in layer_types else None
    return None if getattr(config, "use_sliding_window", None) is False else int(window)


def past_the_window(config, tokens: int, what: str = "prompt + max_new_tokens",
                    fix: str = "keep prompt + --max-new-tokens within") -> str | None:
    """Why a request of `tokens` tokens in all (prompt + cap) cannot be decoded, or None."""
    window = sliding_window(config)
    if window is None or tokens <= window:
        return None
    return (f"{what} = {tokens} tokens pass the model's sliding window of {window} tokens "
            f"(its config's `sliding_window`), which solm's runtimes do not implement: "
            f"{fix} {window} tokens")


def _rope(config) -> dict:
    return dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
                or {})


@dataclass(frozen=True)
class Feature:
    """A model feature, how to see it in a config, and whether solm's runtimes implement it
    (the one table `solm check-model` prints and any exporter shares)."""

    name: str
    present: Callable[[Any], bool]
    supported: bool
    note: str


FEATURES: tuple[Feature, ...] = (
    Feature("grouped-query attention",
            lambda c: (getattr(c, "num_key_value_heads", None) or 0)
            < (getattr(c, "num_attention_heads", None) or 0),
            True, "shared KV heads read directly (SDPA's enable_gqa), never copied"),
    Feature("attention logit softcap", lambda c: bool(getattr(c, "attn_logit_softcapping", None)),
            True, "scores capped in solm's kernels (Gemma-2)"),
    Feature("final logit softcap", lambda c: bool(getattr(c, "final_logit_softcapping", None)),
            True, "the model's own output head"),
    Feature("sliding window", lambda c: sliding_window(c) is not None,
            True, "requests within the window; a longer one is refused by name"),
    Feature("RoPE scaling", lambda c: _rope(c).get("rope_type", "default") != "default",
            True, "the model's own rotary module, from each token's position"),
    Feature("encoder-decoder", lambda c: bool(getattr(c, "is_encoder_decoder", False)),
            False, "the runtimes decode causal language models only"),
    Feature("ALiBi position bias",
            lambda c: bool(getattr(c, "alibi", False))
            or getattr(c, "position_embedding_type", None) == "alibi",
            False, "the kernels add no position bias to the scores"),
    Feature("multimodal RoPE (M-RoPE)", lambda c: "mrope_section" in _rope(c),
            False, "positions are one index per token"),
    Feature("attention sinks", lambda c: getattr(c, "model_type", None) == "gpt_oss",
            False, "the kernels have no per-head sink logits"),
)


def unsupported_features(config) -> list[str]:
    """`name: why` for each feature of `config` no runtime implements."""
    return [f"{f.name}: {f.note}" for f in FEATURES if not f.supported and f.present(config)]


def present_features(config) -> list[Feature]:
    return [f for f in FEATURES if f.present(config)]
