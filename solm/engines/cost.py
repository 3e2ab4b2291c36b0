"""`--engine auto` from measurements: on the engines that can run a decode, the one where the
model's measured tokens per pass buy the most tokens per second.

Two records in solm's cache, both measured on this machine:
- `step_cost.json`: what `solm bench step` timed, per CPU and base model: each engine's and
  weight format's milliseconds for a pass of k tokens in k sequences;
- `tokens_per_pass.json`: per model and decode (system and mode), what its last finished
  decode here did per forward pass: the content tokens it wrote (what a user reads) and the
  tokens it fed (the pass's width: tags and a block's first tokens included).

An engine's rate is content tokens per pass / ms of a pass as wide as the tokens fed (linear
between the ks measured): a PASTA pass that feeds 1.5 tokens to write 1.06 content tokens
costs a 1.5-token pass. Without a measurement for this CPU and model, `auto` keeps the registry's
order of preference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence


KEEP_MODELS = 200  # models whose tokens per pass are kept (the newest)


def _cache(name: str) -> Path:
    from solm.core.models import cache_root

    return cache_root() / name


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # no record (or a torn one): auto keeps its order


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


FLASH_ENV = "SOLM_LLAMA_FLASH_ATTN"  # on / off: over what was measured
FLASH = "+flash"  # llama.cpp's measured variant with its flash attention on


def record_flash_attn(result: dict) -> bool | None:
    """From `solm bench step`'s figures: llama.cpp's flash attention wins on this CPU when,
    for every format timed both ways without a flag, its one-token pass and its passes
    summed over the ks cost less; kept in solm's cache per CPU (None: not timed both ways,
    or a flagged row: nothing is decided)."""
    rows = {e["variant"]: e["ms"] for e in kept_rows(result) if e["engine"] == "llama.cpp"}
    pairs = [(rows[v], rows[v + FLASH]) for v in rows if not v.endswith(FLASH)
             and v + FLASH in rows]
    if not pairs:
        return None
    # faster for a one-token pass (every decode's commonest) and over the ks together
    on = all(sum(f.values()) < sum(o.values()) and f[min(f, key=int)] < o[min(o, key=int)]
             for o, f in pairs)
    path = _cache("llama_flash_attn.json")
    data = _read(path)
    data[result["cpu"]] = on
    _write(path, data)
    return on


def flash_attn_here() -> bool:
    """llama.cpp's flash attention for this CPU: $SOLM_LLAMA_FLASH_ATTN (on / off), else
    what `solm bench step` measured here, else off."""
    import os

    forced = os.environ.get(FLASH_ENV, "").strip().lower()
    if forced in ("on", "off"):
        return forced == "on"
    from solm.engines.bandwidth import cpu_description

    return bool(_read(_cache("llama_flash_attn.json")).get(cpu_description(), False))


def base_model(model: str) -> str:
    """The model whose weights' shapes decide a pass's cost: a LoRA adapter's parent or the
    base a kept difference was packed against (their passes cost what those do), else the
    model itself."""
    from solm.core.kept_difference import packed_base
    from solm.core.models import ALIASES, adapter_parent, artifact_folder

    base = packed_base(str(model))
    if base is not None:
        return base_model(base)
    folder = Path(artifact_folder(str(model)) or str(model))
    if (folder / "adapter_config.json").is_file():
        try:
            return base_model(adapter_parent(folder))
        except Exception:
            return str(model)
    return str(model) if str(model) in ALIASES or not folder.exists() else str(folder.resolve())


def decode_key(system: str, config) -> str:
    mode = getattr(config, "mode", None)
    return f"{system}:{mode}" if mode else system


def kept_rows(result: dict) -> list[dict]:
    """The engine rows of a `solm bench step` result that carry no flag (repeats that
    wandered, a wider pass cheaper than a narrower one)."""
    return [e for e in result["engines"] if not e.get("flags")]


def record_step_costs(result: dict) -> Path | None:
    """Keep `solm bench step`'s unflagged rows for `auto` (per CPU, per base model; a
    flagged row leaves what an earlier run kept for it); None when no row was kept."""
    kept = kept_rows(result)
    if not kept:
        return None
    path = _cache("step_cost.json")
    data = _read(path)
    before = data.get(result["cpu"], {}).get(base_model(result["model"]), {})
    fresh = {(e["engine"], e["variant"]) for e in kept}
    rows = [e for e in before.get("engines", []) if (e["engine"], e["variant"]) not in fresh
            and not e.get("flags")]
    data.setdefault(result["cpu"], {})[base_model(result["model"])] = {
        **result, "engines": rows + kept}
    _write(path, data)
    return path


def record_tokens_per_pass(model: str, system: str, config, rows: Sequence[dict]) -> None:
    """Keep what a finished decode of `model` measured per pass (rows that carry
    `content_tokens` and `forward_passes`; the tokens fed are `tokens_fed`, else the tokens
    written: `generated_tokens` or `total_tokens`, else the content tokens)."""
    counted = [r for r in rows if r.get("forward_passes") and "content_tokens" in r]
    if not counted:
        return
    passes = sum(r["forward_passes"] for r in counted)
    fed = sum(r.get("tokens_fed", r.get("generated_tokens", r.get("total_tokens",
                                                                   r["content_tokens"])))
              for r in counted)
    path = _cache("tokens_per_pass.json")
    data = _read(path)
    entry = data.pop(str(model), {})  # the newest last: the oldest go past KEEP_MODELS
    entry[decode_key(system, config)] = {
        "content": round(sum(r["content_tokens"] for r in counted) / passes, 4),
        "fed": round(fed / passes, 4)}
    data[str(model)] = entry
    _write(path, dict(list(data.items())[-KEEP_MODELS:]))


def tokens_per_pass(model: str, system: str, config) -> tuple[float, float]:
    """(content tokens, tokens fed) a pass of this decode handles, as last measured here
    ((1.0, 1.0) unmeasured; a record from before the tokens fed were kept counts as both)."""
    kept = (_read(_cache("tokens_per_pass.json")).get(str(model), {})
            .get(decode_key(system, config), 1.0))
    if isinstance(kept, dict):
        return float(kept["content"]), float(kept["fed"])
    return float(kept), float(kept)


def pass_ms(ms: dict, k: float) -> float:
    """A pass's ms at `k` tokens (fractional k: linear between the measured ks; beyond the
    last, growing at the last step's slope)."""
    points = sorted((int(x), float(v)) for x, v in ms.items())
    if len(points) == 1 or k <= points[0][0]:  # one k measured: every pass costs it
        return points[0][1]
    for (k0, v0), (k1, v1) in zip(points, points[1:]):
        if k <= k1:
            return v0 + (v1 - v0) * (k - k0) / (k1 - k0)
    (k0, v0), (k1, v1) = points[-2:]
    return v1 + (v1 - v0) * (k - k1) / (k1 - k0)


def engine_rates(engines: dict, model: str, system: str, config, settings,
                 cpu: str | None = None
                 ) -> tuple[dict[str, float], tuple[float, float]]:
    """({engine: content tokens per ms} for the `engines` (name -> `Engine`) measured here,
    (content tokens, tokens fed) per pass). An engine's weight format is the one its
    settings name (`Engine.format_setting`), else its fastest measured one."""
    if cpu is None:
        from solm.engines.bandwidth import cpu_description

        cpu = cpu_description()
    measured = _read(_cache("step_cost.json")).get(cpu, {}).get(base_model(model))
    tpp = tokens_per_pass(model, system, config)
    content, fed = tpp
    rates: dict[str, float] = {}
    if not measured:
        return rates, tpp
    for name, engine in engines.items():
        rows = [e for e in measured["engines"] if e["engine"] == name]
        wanted = engine.measured_variant(settings) if settings is not None else None
        rows = [e for e in rows if e["variant"] == wanted] or rows
        if rows:
            rates[name] = max(content / pass_ms(e["ms"], max(1.0, fed)) for e in rows)
    return rates, tpp


def fastest(engines: dict, model: str | None, system: str, config,
            settings) -> tuple[str, str] | None:
    """(the engine of `engines` (name -> `Engine`) with the highest measured rate, why), or
    None when fewer than two of them were measured on this CPU for this model."""
    if model is None:
        return None
    rates, tpp = engine_rates(engines, model, system, config, settings)
    if len(rates) < 2:
        return None
    best = max(rates, key=rates.get)
    figures = ", ".join(f"{n} {1000 * r:.1f}" for n, r in
                        sorted(rates.items(), key=lambda x: -x[1]))
    return best, (f"measured here (`solm bench step`; a pass feeds {tpp[1]:.2f} tokens and "
                  f"writes {tpp[0]:.2f} content tokens): {figures} content tokens/s")


def fastest_one_token_format(engine: str, model: str, default: str,
                             cpu: str | None = None) -> str:
    """The weight format of `engine` whose one-token pass `solm bench step` measured fastest
    on this CPU for `model` (its flash-attention variant folded in), else `default`."""
    if cpu is None:
        from solm.engines.bandwidth import cpu_description

        cpu = cpu_description()
    measured = _read(_cache("step_cost.json")).get(cpu, {}).get(base_model(model), {})
    rows = [e for e in measured.get("engines", []) if e["engine"] == engine and e.get("ms")]
    if not rows:
        return default
    best = min(rows, key=lambda e: pass_ms(e["ms"], 1.0))
    return best["variant"].removesuffix(FLASH)
