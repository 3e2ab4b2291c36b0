"""The llama.cpp engine: the model exported to a GGUF (solm's cache) and decoded through
llama-cpp-python (`solm.engines.llamacpp`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from solm.core.errors import SolmError
from solm.engines.base import Engine
from solm.engines.cost import FLASH


class LlamaCppEngine(Engine):
    name = "llama.cpp"
    summary = "the model exported to a GGUF, decoded by llama-cpp-python: faster on a CPU"
    format_option = "gguf_types"  # the `solm bench step` option naming its formats
    exact_format = "f32"  # its logits equal the Hugging Face forward's (fp32)
    own_settings = frozenset({"gguf_type"})
    format_setting = "gguf_type"

    def unavailable(self) -> str | None:
        from solm.engines.llamacpp.binding import llama_cpp_available

        return None if llama_cpp_available() else "llama-cpp-python is not installed"

    def install_hint(self) -> str:
        from solm.engines.llamacpp.binding import INSTALL_HINT

        return INSTALL_HINT

    def refusal(self, system: str, *, config=None, settings=None, model: str | None = None,
                policy=None, **_) -> str | None:
        check = {"pasta": _pasta_refusal, "pdiff": _pdiff_refusal,
                 "tip": _tip_refusal}.get(system)
        why = check(config=config, settings=settings, model=model, policy=policy) \
            if check else None
        return why or _settings_refusal(settings) or _given_gguf_refusal(model, settings,
                                                                         system) \
            or _architecture_refusal(model)

    def settle(self, settings, model: str | None, system: str) -> None:
        """A GGUF given as the model decodes with its own weight type (and KV type)."""
        if settings is not None and str(model or "").endswith(".gguf"):
            from solm.engines.llamacpp.given import given_gguf

            settings.gguf_type = given_gguf(str(model), settings.gguf_type, system,
                                            _registers(settings))

    def load(self, model: str, settings, dtype: str, device: str | None, system: str,
             num_registers: int = 16):
        """The model in fp32 on the CPU (the export's source, once, and the decoding rules'
        vocabulary), and `settings.gguf` set to its GGUF (exported on first use)."""
        from solm.core.models import load_decoder
        from solm.core.notices import notice
        from solm.engines.llamacpp.model import gguf_for, kv_type

        if str(model).endswith(".gguf"):
            from solm.engines.llamacpp.given import given_gguf

            settings.gguf_type = given_gguf(model, settings.gguf_type, system, num_registers)
            loaded = load_decoder(model, dtype="fp32", device="cpu", system=system,
                                  num_registers=num_registers)
            settings.gguf = str(Path(model).expanduser().resolve())
            notice(f"engine llama.cpp: {model} as given ({settings.gguf_type} weights, "
                   f"{kv_type(settings).upper()} KV cache)")
            return loaded
        loaded = load_decoder(model, dtype="fp32", device="cpu", system=system,
                              num_registers=num_registers)
        settings.gguf = str(gguf_for(model, settings.gguf_type, system, num_registers,
                                     loaded=loaded))
        notice(f"engine llama.cpp: {settings.gguf_type} weights, "
               f"{kv_type(settings).upper()} KV cache ({settings.gguf})")
        return loaded

    def step(self, kind: str, settings, cells: int, sequences: int | None = None,
             independent: bool = False):
        """A llama.cpp context of `cells` cells (one unified cache, or a stream per request
        when `independent`) behind the step `kind` speaks."""
        super().step(kind, settings, cells)
        from solm.engines.llamacpp.binding import MAX_SEQUENCES
        from solm.engines.cost import flash_attn_here
        from solm.engines.llamacpp.model import llama_context

        seqs = sequences if independent else min(MAX_SEQUENCES, sequences or MAX_SEQUENCES)
        ctx = llama_context(settings, cells, seqs, unified=not independent,
                            flash_attn_faster=flash_attn_here())
        if kind == "paged":
            from solm.engines.llamacpp.tip import LlamaKV

            return LlamaKV(ctx)
        from solm.engines.llamacpp.step import LlamaCppStep, LlamaPdiffStep, LlamaPoolStep

        if kind == "pool":
            return LlamaPoolStep(ctx, cells)
        return LlamaPdiffStep(ctx) if kind == "pdiff" else LlamaCppStep(ctx)

    def sequential_loop(self, settings, cells: int):
        """llama.cpp's own loop on the same GGUF (`solm.engines.llamacpp.own_loop`), in a
        process of its own (`solm.engines.llamacpp.fresh_loop`: in this one, another
        engine's threads slowed it up to 2x)."""
        from solm.engines.cost import flash_attn_here
        from solm.engines.llamacpp.fresh_loop import FreshProcessLoop
        from solm.engines.llamacpp.model import flash_attn, kv_type

        return FreshProcessLoop(settings.gguf, cells, kv_type=kv_type(settings),
                                flash_attn=flash_attn(settings, flash_attn_here()))

    def describe(self, settings, dtype: str) -> str:
        return f"llama.cpp ({settings.gguf_type} GGUF)"

    def probes(self, model: str, formats: Sequence[str]) -> list:
        from solm.engines.llamacpp.model import gguf_for

        # each format with flash attention off and on: which wins depends on the CPU, and
        # `bench step` keeps the winner for this engine's contexts (`cost.flash_attn_here`)
        return [LlamaCppProbe(gguf_for(model, f), f + (FLASH if flash else ""),
                              flash_attn=flash) for f in formats for flash in (False, True)]

    def measured_variant(self, settings) -> str:
        from solm.engines.cost import flash_attn_here
        from solm.engines.llamacpp.model import flash_attn

        return settings.gguf_type + (FLASH if flash_attn(settings, flash_attn_here()) else "")


def _settings_refusal(settings) -> str | None:
    """Why llama.cpp cannot take an engine's settings, whatever the system."""
    if getattr(settings, "quantize", None):
        return ("--quantize quantizes torch's weights; on llama.cpp the export's type is "
                "--gguf-type")
    return None


def _registers(settings) -> int:
    return int(getattr(settings, "registers", None) or 16)


def _given_gguf_refusal(model, settings, system: str) -> str | None:
    """Why llama.cpp cannot decode a GGUF given as the model as it is (see `given_gguf`)."""
    if not str(model or "").endswith(".gguf") or settings is None:
        return None
    from solm.engines.llamacpp.given import given_gguf

    try:
        given_gguf(str(model), getattr(settings, "gguf_type", "q8_0"), system,
                   _registers(settings))
    except SolmError as e:
        return str(e)
    return None


def _pasta_refusal(config, settings, model, **_) -> str | None:
    from solm.core.models import model_positions

    parallel = (getattr(config, "mode", None) == "parallel"
                or getattr(settings, "compare", False))
    if parallel and model_positions(model) != "overlap":
        return (f"PASTA's parallel threads on llama.cpp need a model trained with "
                f"--positions overlap; {model} is laid out Pred-10X (its main thread resumes "
                f"10N positions past a promise, and llama.cpp requires each sequence's next "
                f"position to follow its last): decode it with --engine torch, or --mode "
                f"sequential")
    return None


def _pdiff_refusal(model, **_) -> str | None:
    from solm.core.models import model_positions

    if model_positions(model) != "overlap":
        return (f"Planned Diffusion on llama.cpp needs a model trained with --positions "
                f"overlap; {model} is laid out Pred-10X (its chunks reserve positions the main "
                f"thread jumps over, and llama.cpp requires each sequence's next position to "
                f"follow its last): decode it with --engine torch")
    return None


def _tip_refusal(policy, **_) -> str | None:
    from solm.engines.llamacpp.tip import policy_refusal

    return policy_refusal(policy) if policy is not None else None


class LlamaCppProbe:
    """llama.cpp (`LlamaContext`, one unified cache, as a PASTA decode): the context fed once
    and given to every sequence by `seq_cp`; k tokens in one `llama_decode` call, each in its
    own sequence; the k new cells are removed after every pass. (Contexts of their own would
    make every token read k_max x context cells: llama.cpp reads a unified cache's used
    cells, in blocks of 256, whichever sequence holds them.)"""

    engine = "llama.cpp"

    def __init__(self, gguf, variant: str, threads: int | None = None,
                 flash_attn: bool = False):
        from pathlib import Path

        self.gguf, self.variant, self.threads = str(gguf), variant, threads
        self.flash_attn = flash_attn
        self.weight_bytes = Path(gguf).stat().st_size
        self.ctx = None

    def prepare(self, k_max: int, context: int) -> None:
        from solm.engines.probe import context_ids
        from solm.engines.llamacpp.binding import LlamaContext, Token

        self.context = context
        self.ctx = LlamaContext(self.gguf, n_ctx=context + k_max + 16, n_seq=k_max,
                                flash_attn=self.flash_attn,
                                threads=self.threads)
        ids = context_ids(0, context)
        self.ctx.decode([Token(t, p, 0, logits=p == context - 1) for p, t in enumerate(ids)])
        for s in range(1, k_max):
            self.ctx.seq_cp(0, s)

    def one_pass(self, k: int) -> float:
        from solm.engines.probe import FIRST_ID
        from solm.engines.llamacpp.binding import Token

        c = self.context
        t0 = time.perf_counter()
        self.logits = self.ctx.decode([Token(FIRST_ID + s, c, s) for s in range(k)])
        seconds = time.perf_counter() - t0
        for s in range(k):
            self.ctx.seq_rm(s, c, -1)
        return seconds

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None


def _architecture_refusal(model: str | None) -> str | None:
    """Why solm cannot export the model to a GGUF (its config's architecture), or None."""
    from solm.engines.base import architecture_refusal
    from solm.engines.llamacpp.export import ARCHITECTURES

    return architecture_refusal(model, ARCHITECTURES, "cannot be exported to GGUF by solm yet")
    from solm.core.models import model_architectures

    names = model_architectures(model)
    if names and not any(n in ARCHITECTURES for n in names):
        return (f"architecture {names[0]} cannot be exported to GGUF by solm yet "
                f"(supported: {', '.join(ARCHITECTURES)})")
    return None
