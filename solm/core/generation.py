"""Decode defaults that travel with a model, the Hugging Face way.

A model folder's `generation_config.json` carries its decoding defaults (the kept CPU models
ship `repetition_penalty: 1.2`, without which they loop). A command's flag overrides the
model's value; a setting neither gives takes solm's built-in default. The conventions are
transformers' own: `temperature` and `top_p` apply only when the file says
`do_sample: true` (otherwise decoding is greedy), `repetition_penalty` and
`no_repeat_ngram_size` apply either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENERATION_CONFIG = "generation_config.json"

MODEL_SETTINGS = ("temperature", "top_p", "repetition_penalty", "no_repeat_ngram")


def built_in_defaults(overrides: dict[str, Any] | None = None) -> dict[str, float | int]:
    """solm's defaults of the settings a model may carry: `SamplingConfig`'s fields, with a
    command's own defaults (`overrides`) over them."""
    from solm.core.sampling import SamplingConfig

    base = SamplingConfig()
    out = {k: getattr(base, k) for k in MODEL_SETTINGS}
    out.update({k: v for k, v in (overrides or {}).items() if k in out})
    return out


BUILT_IN: dict[str, float | int] = built_in_defaults()
_ALWAYS = {"repetition_penalty": "repetition_penalty", "no_repeat_ngram_size": "no_repeat_ngram"}
_WHEN_SAMPLING = {"temperature": "temperature", "top_p": "top_p"}


def model_generation_defaults(name_or_path: str) -> dict[str, Any]:
    """solm's decode settings from the model folder's generation_config.json (none for a
    model without one, or a name that is not a local folder or kept model)."""
    from solm.core.jsonl import read_json_file
    from solm.core.models import ARTIFACTS, ALIASES, artifact_folder

    if name_or_path in ARTIFACTS:
        folder = Path(artifact_folder(name_or_path))
    elif name_or_path in ALIASES:
        return {}  # the embedded GGUF ships no decoding defaults
    else:
        folder = Path(name_or_path)
    path = folder / GENERATION_CONFIG
    if not path.is_file():
        return {}
    raw = read_json_file(path, GENERATION_CONFIG)
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    keys = dict(_ALWAYS, **(_WHEN_SAMPLING if raw.get("do_sample") else {}))
    for hf_name, ours in keys.items():
        value = raw.get(hf_name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[ours] = type(BUILT_IN[ours])(value)
    if raw.get("do_sample") and "temperature" not in out:
        out["temperature"] = 1.0  # transformers' default temperature when sampling
    return out


@dataclass
class ResolvedDecode:
    values: dict[str, Any]
    sources: dict[str, str]  # setting -> "flag" | "model" | "default"

    def describe(self) -> str:
        """One line: each setting, and where it came from."""
        names = {"flag": "flag", "model": GENERATION_CONFIG, "default": "solm default"}
        return ", ".join(f"{k} {self.values[k]:g} ({names[self.sources[k]]})"
                         for k in BUILT_IN)


def resolve_decode(model: str, flags: dict[str, Any],
                   defaults: dict[str, Any] | None = None) -> ResolvedDecode:
    """Flags (None = not given) over the model's generation_config.json over solm's
    defaults (`defaults`: a command's own, over `SamplingConfig`'s)."""
    from_model = model_generation_defaults(model)
    values, sources = {}, {}
    for key, default in built_in_defaults(defaults).items():
        if flags.get(key) is not None:
            values[key], sources[key] = flags[key], "flag"
        elif key in from_model:
            values[key], sources[key] = from_model[key], "model"
        else:
            values[key], sources[key] = default, "default"
    return ResolvedDecode(values, sources)
