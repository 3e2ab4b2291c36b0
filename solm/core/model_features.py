"""What solm's runtimes implement of a model's attention, read from its config.

The runtimes run their own attention kernels (`solm.decode.attention`,
`solm.decode.paged_attention`) over shared KV pools. They implement plain causal-LM attention
with GQA, q/k norms (the model's own modules) and Gemma-2's attention softcap. A sliding
window is implemented only where it cannot bind: a request whose prompt and cap together
stay within the window reads exactly what the model's own forward would; a longer one is
refused by name rather than decoded wrongly.
"""

from __future__ import annotations


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
