"""The runtimes on the architectures the field's base models use: Qwen2 and
Qwen3 (GQA, q/k norms), Mistral (a sliding window), Gemma-2 (attention and final softcaps,
sliding windows on every other layer). Each runtime's logits equal the model's own forward
under the structure mask, with the reference run in transformers' eager attention (the one
that honours softcaps). Query weights are scaled up so scores are large and a softcap
really bends them (random tiny models otherwise stay in tanh's linear range)."""

import pytest
import torch

from conftest import TIP_REGISTERS
from policy_matrix import register_traces

from solm.core.chat import text_ids
from solm.core.models import tiny_model
from solm.core.structure import model_mask
from solm.core.systems.pasta import structure
from solm.core.systems.tip import TipVocab
from solm.core.systems.tip import structure as tip_structure
from solm.decode.pasta.runtime import PastaRuntime
from solm.decode.tip.runtime import TipDecodeConfig, TipRuntime

ARCHS = {"qwen2": {}, "qwen3": {}, "mistral": {},
         "gemma2": {"attn_logit_softcapping": 0.5, "final_logit_softcapping": 2.0}}
PROMPT = "User: give me some tips\nAssistant:"
ANNOTATED = ('Tips:\n1. Sleep:<promise topic="sleep" tokens="1"/><async> Get 8 hours.</async>\n'
             '2. Eat:<promise topic="eat" tokens="2"/><async> Eat vegetables and fruit daily, '
             'and drink water.</async>\n<sync/>Also:<promise topic="move" tokens="1"/><async> '
             'Walk every day.</async><sync/> Done.')


def sharp_model(tok, arch: str):
    model, _ = tiny_model(tok, seed=3, num_layers=2, arch=arch, attn_implementation="eager",
                          **ARCHS[arch])
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(30)
    return model


def eager_forward(model, ids, visible, positions):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), position_ids=positions[None],
                     attention_mask=model_mask(visible, model)).logits[0]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_pasta_runtime_logits_equal_the_eager_forward(pasta_tokenizer, arch):
    model = sharp_model(pasta_tokenizer, arch)
    rt = PastaRuntime(model, pasta_tokenizer, pool_size=512)
    prompt, resp = text_ids(pasta_tokenizer, PROMPT), text_ids(pasta_tokenizer, ANNOTATED)
    res = rt.replay(prompt, resp, record_logits=True)
    s = structure(prompt + resp, rt.vocab)
    ref = eager_forward(model, prompt + resp, s.visible, s.position_ids)[len(prompt):]
    assert res.ids == resp
    assert (res.logits - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("arch", list(ARCHS))
def test_tip_runtime_logits_equal_the_eager_forward(tip_tok, arch):
    model = sharp_model(tip_tok, arch)
    rt = TipRuntime(model, tip_tok, num_pages=64, page_size=4, num_registers=TIP_REGISTERS)
    reqs = register_traces(tip_tok, 3, 23, seed=1)
    cfg = TipDecodeConfig(policy="tip", batch_size=2, record_logits=True, check_reads=True,
                          max_new_tokens=64)
    results = {r.rid: r for r in rt.run(reqs, cfg)}
    vocab = TipVocab.from_tokenizer(tip_tok, TIP_REGISTERS)
    for req in reqs:
        ids = req.prompt + req.forced
        s = tip_structure(ids, vocab, len(req.prompt))
        ref = eager_forward(model, ids, s.visible, s.position_ids)[len(req.prompt) - 1:]
        assert results[req.rid].ids == req.forced
        assert (results[req.rid].logits - ref).abs().max().item() < 1e-4


def test_the_softcap_matters_here(pasta_tokenizer):
    """Not vacuous: with the softcap removed, the same Gemma-2 model's logits move."""
    model = sharp_model(pasta_tokenizer, "gemma2")
    ids = text_ids(pasta_tokenizer, PROMPT + " Sleep well.")
    s = structure(ids, PastaRuntime(model, pasta_tokenizer, pool_size=64).vocab)
    capped = eager_forward(model, ids, s.visible, s.position_ids)
    for layer in model.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    uncapped = eager_forward(model, ids, s.visible, s.position_ids)
    assert (capped - uncapped).abs().max().item() > 1e-2


def test_a_sliding_window_that_could_bind_is_refused_by_name(pasta_tokenizer, tip_tok):
    """Mistral with a 24-token window: a request whose prompt + cap fits is decoded (and
    matches the eager forward above); one that could pass the window is refused, naming the
    window and the flag to lower, by every runtime, before anything is decoded."""
    from solm.core.errors import SolmError
    from solm.core.model_features import sliding_window
    from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
    from solm.decode.pasta.runtime import PastaDecodeConfig
    from solm.decode.tip.runtime import TipRequest

    model, _ = tiny_model(pasta_tokenizer, seed=3, arch="mistral", sliding_window=24)
    assert sliding_window(model.config) == 24
    assert sliding_window(tiny_model(pasta_tokenizer, arch="qwen2")[0].config) is None
    prompt = text_ids(pasta_tokenizer, "Hi there")
    rt = BatchedPastaRuntime(model, pasta_tokenizer, pool_size=256)
    fits = PastaDecodeConfig(max_new_tokens=24 - len(prompt))
    (ok, too_long) = sorted(rt.run([
        BatchRequest(0, prompt, fits),
        BatchRequest(1, prompt, PastaDecodeConfig(max_new_tokens=25 - len(prompt)))]),
        key=lambda d: d.rid)
    assert ok.error is None and ok.result is not None
    assert "sliding window of 24 tokens" in too_long.error and "--max-new-tokens" in too_long.error
    tip_model, _ = tiny_model(tip_tok, seed=3, arch="mistral", sliding_window=24)
    trt = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=4, num_registers=TIP_REGISTERS)
    with pytest.raises(SolmError, match="sliding window of 24 tokens"):
        list(trt.run([TipRequest(0, prompt)], TipDecodeConfig(max_new_tokens=30)))
