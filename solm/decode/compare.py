"""One prompt decoded two ways (parallel and sequential), reported so the figures cannot
mislead: the latency ratio and each decode's content tokens per second, each named for what
it is, with warnings when the two answers are not comparable.

- **Latency ratio** = sequential wall time / parallel wall time. It is a speedup only when
  both decodes wrote about the same answer; a short or broken parallel answer makes it large.
- **Content tokens/s** = answer tokens (text tokenized) / wall time, per decode; their ratio
  is the rate gained whatever the lengths.
- **Length mismatch**: the answers' lengths differ by more than `LENGTH_RATIO` (2x).
- **Degenerate**: an answer made mostly of tags and list markers (`is_degenerate`).
"""

from __future__ import annotations

import re

LENGTH_RATIO = 2.0
_LIST_MARKER = re.compile(r"(?:(?<=\s)|^)(?:\d+[.)]|[-*\u2022])(?=\s|$)")
_WORD = re.compile(r"[^\W\d_]{2,}")


def is_degenerate(response: str, content_tokens: int | None = None,
                  total_tokens: int | None = None) -> bool:
    """True for an answer that is mostly tags and list markers: no word of two letters or
    more, letters under 40% of its visible characters once list markers are removed, or
    (given token counts) tags making up more than half of the tokens written."""
    visible = re.sub(r"\s+", "", _LIST_MARKER.sub(" ", response))
    letters = sum(len(w) for w in _WORD.findall(response))
    if letters == 0 or not visible:
        return True
    if letters < 0.4 * len(visible):
        return True
    if content_tokens is not None and total_tokens:
        return content_tokens < 0.5 * total_tokens
    return False


def steps_phrase(content_tokens: int, forward_passes: int, tags: bool = True) -> str:
    """How the steps compare with one token per step, worded the right way round (`tags`:
    the answer has control tags, which take steps of their own)."""
    if forward_passes <= 0 or content_tokens <= 0:
        return "no decode steps" if forward_passes <= 0 else "no answer tokens"
    ratio = content_tokens / forward_passes
    if abs(ratio - 1) < 0.005:
        return "one token per step, as sequential decoding"
    if ratio > 1:
        return f"{ratio:.2f}x fewer steps than one token per step"
    why = " (tags cost steps)" if tags else ""
    return f"{1 / ratio:.2f}x more steps than one token per step{why}"


def compare_report(parallel: dict, sequential: dict) -> dict:
    """Figures of a `--compare`: `parallel` and `sequential` are `result_record` rows."""

    def rate(row: dict) -> float:
        return row["content_tokens"] / max(row["wall_s"], 1e-9)

    longer = max(parallel["content_tokens"], sequential["content_tokens"])
    shorter = min(parallel["content_tokens"], sequential["content_tokens"])
    warnings = []
    if shorter == 0 or longer / shorter > LENGTH_RATIO:
        warnings.append(f"the answers differ in length by more than {LENGTH_RATIO:g}x "
                        f"({parallel['content_tokens']} vs {sequential['content_tokens']} "
                        f"content tokens): the latency ratio compares two different answers")
    for name, row in (("parallel", parallel), ("sequential", sequential)):
        if is_degenerate(row["response"], row["content_tokens"], row.get("total_tokens")):
            warnings.append(f"the {name} answer is degenerate (mostly tags and list markers)")
    return {
        "latency_ratio": sequential["wall_s"] / max(parallel["wall_s"], 1e-9),
        "parallel_content_tokens_per_s": rate(parallel),
        "sequential_content_tokens_per_s": rate(sequential),
        "content_rate_ratio": rate(parallel) / max(rate(sequential), 1e-9),
        "warnings": warnings,
    }


def compare_lines(parallel: dict, sequential: dict) -> list[str]:
    """The `--compare` block, one labelled figure per line."""
    r = compare_report(parallel, sequential)
    lines = []
    for name, row, rate in (("parallel", parallel, r["parallel_content_tokens_per_s"]),
                            ("sequential", sequential, r["sequential_content_tokens_per_s"])):
        lines.append(f"{name:>10}: {row['content_tokens']} content tokens, "
                     f"{row['forward_passes']} forward passes, {row['wall_s']:.2f} s wall: "
                     f"{rate:.1f} content tokens/s")
    lines.append(f"latency ratio (sequential wall time / parallel wall time): "
                 f"{r['latency_ratio']:.2f}x")
    lines.append(f"content tokens/s ratio (parallel / sequential): "
                 f"{r['content_rate_ratio']:.2f}x")
    lines += [f"warning: {w}" for w in r["warnings"]]
    return lines
