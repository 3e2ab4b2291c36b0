"""`solm check-model`: does each runtime decode this model as the model itself computes?

For each system (sequential, PASTA, TIP, Planned Diffusion) the runtime teacher-forces a short
fixed answer written in that system's language and records its logits; the reference is the
model's own forward over the whole sequence under the same structure mask
(`solm.core.structure`), in transformers' eager attention (the one that honours every
feature, softcaps included). A system passes when the largest logit difference stays under
the tolerance; a model feature no runtime implements (`solm.core.model_features`) refuses the
systems it concerns by name instead of decoding wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from solm.core.chat import text_ids
from solm.core.errors import SolmError
from solm.core.model_features import unsupported_features
from solm.core.structure import model_mask

CHECKED_SYSTEMS = ("sequential", "pasta", "tip", "pdiff")
TOLERANCE = 1e-3  # max |logit difference| in fp32
PROMPT = "Give me two tips for a calm morning."
PLAIN = " Wake up early and drink a glass of water."
PASTA = ('Tips:\n1. Rest:<promise topic="rest" tokens="1"/><async> Sleep well.</async>\n'
         '2. Water:<promise topic="water" tokens="1"/><async> Drink a glass.</async>\n<sync/>'
         'Done.')
TIP = "<reg_0>Two plus two. <reg_1>That makes four. <reg_0>So: four. <reg_2>Answer: 4"
PDIFF_PLAN = 'Tips: <promise topic="rest" tokens="1"/> and <promise topic="water" tokens="1"/>' \
             '<sync/> done.'
REGISTERS = 4


@dataclass
class SystemCheck:
    system: str
    status: str  # ok, differs, refused
    max_diff: float | None = None
    detail: str = ""


def _forward(model, ids: list[int], visible: torch.Tensor, positions: torch.Tensor):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids], device=model.device),
                     position_ids=positions[None].to(model.device),
                     attention_mask=model_mask(visible, model).to(model.device)).logits[0]


def _check_sequential(model, tok) -> float:
    from solm.decode.pasta.runtime import PastaRuntime

    prompt, resp = text_ids(tok, PROMPT), text_ids(tok, PLAIN)
    res = PastaRuntime(model, tok, pool_size=512).replay(prompt, resp, mode="sequential",
                                                         record_logits=True)
    n = len(prompt + resp)
    ref = _forward(model, prompt + resp, torch.ones(n, n, dtype=torch.bool).tril(),
                   torch.arange(n))[len(prompt):]
    return (res.logits.float().cpu() - ref.float().cpu()).abs().max().item()


def _check_pasta(model, tok) -> float:
    from solm.core.systems.pasta import structure
    from solm.decode.pasta.runtime import PastaRuntime

    rt = PastaRuntime(model, tok, pool_size=512)
    prompt, resp = text_ids(tok, PROMPT), text_ids(tok, PASTA)
    res = rt.replay(prompt, resp, record_logits=True)
    s = structure(prompt + resp, rt.vocab)
    ref = _forward(model, prompt + resp, s.visible, s.position_ids)[len(prompt):]
    return (res.logits.float().cpu() - ref.float().cpu()).abs().max().item()


def _check_tip(model, tok) -> float:
    from solm.core.systems.tip import TipVocab, structure
    from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipRuntime

    prompt, forced = text_ids(tok, PROMPT), text_ids(tok, TIP)
    rt = TipRuntime(model, tok, num_pages=64, page_size=8, num_registers=REGISTERS)
    cfg = TipDecodeConfig(policy="tip", batch_size=1, record_logits=True,
                          max_new_tokens=len(forced) + 1)
    (res,) = list(rt.run([TipRequest(0, prompt, forced=forced)], cfg))
    ids = prompt + forced
    s = structure(ids, TipVocab.from_tokenizer(tok, REGISTERS), len(prompt))
    ref = _forward(model, ids, s.visible, s.position_ids)[len(prompt) - 1:]
    return (res.logits.float().cpu() - ref.float().cpu()).abs().max().item()


def _check_pdiff(model, tok) -> float:
    """The plan teacher-forced, the chunks denoised; every recorded denoising pass's rows
    against the training forward over the sequence as it stood at that pass."""
    from solm.core.systems.pdiff import structure
    from solm.decode.pdiff.config import PdiffDecodeConfig
    from solm.decode.pdiff.runtime import PdiffRuntime

    rt = PdiffRuntime(model, tok, pool_size=512, max_batch=1)
    prompt = text_ids(tok, PROMPT)
    res = rt.generate(prompt, PdiffDecodeConfig(max_new_tokens=96, record=True),
                      script=text_ids(tok, PDIFF_PLAN))
    seq = prompt + res.ids
    starts = [i for i, t in enumerate(seq) if t == rt.vocab.async_open]
    worst = 0.0
    for step in res.steps or []:
        state = list(seq)
        for k, (tokens, _) in step.items():
            state[starts[k]:starts[k] + len(tokens)] = tokens
        s = structure(state, rt.vocab)
        logits = _forward(model, state, s.visible, s.position_ids).float().cpu()
        for k, (tokens, rows) in step.items():
            expected = logits[starts[k]:starts[k] + len(tokens)]
            worst = max(worst, (rows.float().cpu() - expected).abs().max().item())
    if not res.steps:
        raise ValueError("the plan produced no chunk to denoise")
    return worst


CHECKS: dict[str, tuple[str, Callable]] = {
    # system -> (control tokens the model needs, check)
    "sequential": ("pasta", _check_sequential),
    "pasta": ("pasta", _check_pasta),
    "tip": ("tip", _check_tip),
    "pdiff": ("pdiff", _check_pdiff),
}


def check_model(load: Callable[[str], tuple], systems: tuple[str, ...] = CHECKED_SYSTEMS,
                tolerance: float = TOLERANCE) -> list[SystemCheck]:
    """Check each system; `load(control_tokens)` returns (model, tokenizer) with that
    system's control tokens, loaded in eager attention."""
    out = []
    for system in systems:
        tokens, check = CHECKS[system]
        model, tok = load(tokens)
        refused = unsupported_features(model.config)
        if refused:
            out.append(SystemCheck(system, "refused", detail="; ".join(refused)))
            continue
        try:
            diff = check(model, tok)
        except (ValueError, SolmError) as e:  # a runtime's refusal (a window it would pass)
            out.append(SystemCheck(system, "refused", detail=str(e)))
            continue
        status = "ok" if diff < tolerance else "differs"
        detail = "" if status == "ok" else (
            f"max |logit difference| {diff:.3g} over {tolerance:g}: the model's attention may "
            f"not go through transformers' attention interface (custom modeling code?)")
        out.append(SystemCheck(system, status, diff, detail))
    return out
