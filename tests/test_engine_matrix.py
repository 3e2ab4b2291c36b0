"""Every decode system on every engine, one test body over both registries (kvpress's shape):
a cell decodes through the registry's own path (`prepare` chooses the engine, `load`,
`runner` asks the engine for its step) and every logits row it computed equals one forward
pass of the Hugging Face model under the system's rules written a second way
(`tests/oracles.py`), or the engine refuses the decode and the error names it.

Models are tiny steered llamas (`steered_models`) that write their system's tags, so the
threads, register kills and chunks are exercised; llama.cpp decodes an f32 export (F32 KV),
where its logits equal the reference's to TOL; onnxruntime its fp32 graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from oracles import pasta_oracle, pdiff_oracle, tip_oracle
from steered_models import save_model, steered_model

from solm.core.errors import SolmError
from solm.core.records import Record
from solm.core.sampling import SamplingConfig
from solm.decode.jobs import pending_jobs
from solm.decode.registry import decode_system, decode_systems
from solm.engines import ENGINES

TOL = 1e-3  # fp32 logits of an f32 export with an F32 KV cache
GREEDY = SamplingConfig(temperature=0.0)
PROMPTS = ["Give me three tips for a trip.", "What is 17 * 23?", "List some fruits.",
           "Name two rivers."]


def oracle_logits(model, ids: list[int], visible: torch.Tensor,
                  positions: list[int]) -> torch.Tensor:
    """The HF model's forward over `ids`, each token seeing what `visible` says."""
    from solm.core.structure import model_mask

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                     attention_mask=model_mask(visible, model)).logits[0].float()


def close(ours: torch.Tensor, ref: torch.Tensor) -> None:
    assert ours.shape == ref.shape
    assert (ours.float() - ref).abs().max().item() < TOL


# ---- the systems' cases ---------------------------------------------------------------------

def pasta_folder(folder, positions: str) -> str:
    from solm.core.models import load_tokenizer
    from solm.core.systems.pasta import PastaVocab
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")
    vocab = PastaVocab.from_tokenizer(tok)
    model = steered_model(tok, [vocab.promise_open, vocab.sync, *list(vocab.close_tens)[:3]],
                          0.07, seed=4)
    model.config.solm_positions = positions
    return save_model(model, tok, folder, system="pasta", control_tokens="pasta",
                      positions=positions)


def check_pasta(layout: str):
    def check(model, tok, jobs, results, runner):
        threads = 0
        for job in jobs:
            res = results[job.rid]
            prompt = list(job.prompt_ids)
            ids = prompt + list(res.ids)
            visible, positions, _ = pasta_oracle(ids, tok, layout)
            ref = oracle_logits(model, ids, visible, positions)[len(prompt):]
            fed = [i for i in range(len(res.ids)) if i not in set(res.unfed)]
            close(res.logits, ref[fed])
            threads = max(threads, res.threads)
        assert threads >= 3  # the cell ran parallel threads
    return check


def tip_folder(folder, _positions=None) -> str:
    from solm.core.models import load_tokenizer
    from solm.core.systems.tip import TipVocab
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "tip", num_registers=4)
    model = steered_model(tok, TipVocab.from_tokenizer(tok, 4).control_ids, 1.0, seed=5)
    return save_model(model, tok, folder, system="tip", control_tokens="tip",
                      num_registers=4)


def check_tip(model, tok, jobs, results, runner):
    """Each generated token's logits row: the forward over what TIP's rules keep alive."""
    evicted = 0
    for job in jobs:
        res = results[job.rid]
        prompt = list(job.prompt_ids)
        ids = prompt + list(res.ids)
        visible, positions, _ = tip_oracle(ids, tok, len(prompt))
        ref = oracle_logits(model, ids, visible, positions)
        close(res.logits, ref[len(prompt) - 1:len(prompt) - 1 + len(res.logits)])
        evicted += res.evicted_pages
    assert evicted > 0  # register reuse killed steps and freed their pages


def check_h2o(model, tok, jobs, results, runner):
    """H2O keeps the tokens its scores choose: each decode step's logits row equals the
    forward over exactly the tokens it read, at their own positions."""
    for job in jobs:
        res = results[job.rid]
        ids = list(job.prompt_ids) + list(res.ids)
        start = len(job.prompt_ids)
        assert len(res.reads) == len(res.logits) - 1
        assert min(len(r) for r in res.reads) < start + len(res.reads)  # something evicted
        for j, read in enumerate(res.reads):
            q = start + j  # the token this step fed
            assert read[-1] == q and read == sorted(read)
            sub = torch.tensor([ids[k] for k in read])
            with torch.no_grad():
                row = model(input_ids=sub[None], position_ids=torch.tensor([read])
                            ).logits[0, -1].float()
            close(res.logits[j + 1][None], row[None])


def pdiff_folder(folder, positions: str, block_size: int = 0) -> str:
    from solm.core.models import load_tokenizer
    from solm.core.systems.pdiff import PdiffVocab
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pdiff")
    vocab = PdiffVocab.from_tokenizer(tok)
    model = steered_model(tok, [vocab.promise_open], 0.0, seed=6)
    model.config.solm_positions = positions
    return save_model(model, tok, folder, system="pdiff", control_tokens="pdiff",
                      positions=positions, **({"block_size": block_size} if block_size else {}))


def pdiff_blocks_folder(folder, positions: str) -> str:
    """A Planned Diffusion model trained (as its solm.json says) with chunk blocks of 3."""
    return pdiff_folder(folder, positions, block_size=3)


PLANS = ['Intro <promise topic="a" tokens="2"/> and <promise topic="b" tokens="3"/><sync/> end.',
         'Three <promise topic="x" tokens="2"/><promise topic="y" tokens="1"/>'
         '<promise topic="z" tokens="2"/><sync/> then <promise topic="w" tokens="1"/><sync/>.']


def run_pdiff(runner, jobs, tok):
    """Planned Diffusion with its plans forced (a random model plans nothing worth checking):
    the registry's runtime, on the step the engine gave it."""
    from solm.core.chat import text_ids
    from solm.decode.pdiff.runtime import PdiffRequest

    config = runner.config
    return {d.rid: d.result for d in runner.rt.run(
        PdiffRequest(job.rid, list(job.prompt_ids), config,
                     text_ids(tok, PLANS[job.rid % len(PLANS)])) for job in jobs)}


def check_pdiff(layout: str, block_size: int = 0):
    def check(model, tok, jobs, results, runner):
        from solm.core.systems.pdiff import PdiffVocab

        vocab = PdiffVocab.from_tokenizer(tok)
        checked = 0
        for job in jobs:
            res = results[job.rid]
            seq = list(job.prompt_ids) + list(res.ids)
            starts = [i for i, t in enumerate(seq) if t == vocab.async_open]
            for step in res.steps[::3]:  # every third pass: the oracle is a slow loop
                state = list(seq)
                for k, (tokens, _) in step.items():
                    state[starts[k]:starts[k] + len(tokens)] = tokens
                visible, positions, _, _ = pdiff_oracle(state, tok, layout, block_size)
                ref = oracle_logits(model, state, visible, positions)
                for k, (tokens, rows) in step.items():
                    fed = ~torch.isnan(rows).any(-1)  # with blocks, a pass feeds some slots
                    assert bool(fed.any()) and (block_size or bool(fed.all()))
                    close(rows[fed], ref[starts[k]:starts[k] + len(tokens)][fed])
                    checked += 1
        assert checked >= 8
    return check


def sot_folder(folder, _positions=None) -> str:
    from solm.core.models import load_tokenizer, tiny_model

    tok = load_tokenizer("smollm2-135m")
    model, _ = tiny_model(tok, seed=1)
    return save_model(model, tok, folder)


def check_sot(model, tok, jobs, results, runner):
    """Every point decodes as if alone: its logits rows equal one forward over the shared
    prefix, its own prompt and its tokens."""
    points = 0
    for job in jobs:
        res = results[job.rid]
        for own, gen, rows in zip(res.point_prompts, res.point_ids, res.point_logits):
            ids = res.prefix_ids + own + gen
            n = len(ids)
            full = oracle_logits(model, ids, torch.ones(n, n, dtype=torch.bool).tril(),
                                 list(range(n)))
            start = len(res.prefix_ids) + len(own) - 1
            close(rows, full[start:start + rows.shape[0]])
            points += 1
    assert points >= 6


STEP_OF = {"pasta": "slots", "pdiff": "pdiff", "tip": "paged", "sot": "slots"}


def runner_step(runner):
    """The engine step a runner's runtime runs on (None: its own torch step)."""
    rt = getattr(runner, "batched", None) or runner.rt
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.decode.pdiff.runtime import PdiffRuntime
    from solm.decode.sot.batched import BatchedSotRuntime
    from solm.decode.tip.runtime import TipRuntime

    if isinstance(rt, TipRuntime):
        return rt.engine_kv
    assert isinstance(rt, (BatchedPastaRuntime, PdiffRuntime, BatchedSotRuntime)), rt
    from solm.engines.torch.slots import SlotStep

    return None if isinstance(rt.forward, SlotStep) else rt.forward


@dataclass(frozen=True)
class Case:
    system: str
    folder: Callable  # (folder, positions) -> the saved model
    positions: str | None
    config: dict  # the decode config's values
    settings: dict  # the engine settings' values
    check: Callable  # (model, tokenizer, jobs, results, runner) -> asserts
    run: Callable | None = None  # (runner, jobs, tokenizer) -> results (default: runner.run)


CASES = {
    "pasta-overlap": Case("pasta", pasta_folder, "overlap",
                          dict(mode="parallel", max_new_tokens=40, record_logits=True),
                          dict(batch_size=2), check_pasta("overlap")),
    "pasta-pred10x": Case("pasta", pasta_folder, "pred10x",
                          dict(mode="parallel", max_new_tokens=40, record_logits=True),
                          dict(batch_size=2), check_pasta("pred10x")),
    "tip": Case("tip", tip_folder, None,
                dict(policy="tip", batch_size=2, max_new_tokens=48, record_logits=True),
                dict(registers=4, page_size=16, num_pages=64), check_tip),
    "tip-h2o": Case("tip", tip_folder, None,
                    dict(policy="h2o", budget=40, batch_size=2, max_new_tokens=48,
                         record_logits=True, record_reads=True),
                    dict(registers=4, page_size=16, num_pages=64), check_h2o),
    "pdiff-overlap": Case("pdiff", pdiff_folder, "overlap", dict(max_new_tokens=120,
                                                                  record=True),
                          dict(batch_size=2, pool_size=1024), check_pdiff("overlap"),
                          run=run_pdiff),
    "pdiff-overlap-blocks": Case("pdiff", pdiff_blocks_folder, "overlap",
                                 dict(max_new_tokens=120, record=True),
                                 dict(batch_size=2, pool_size=1024), check_pdiff("overlap", 3),
                                 run=run_pdiff),
    "pdiff-pred10x": Case("pdiff", pdiff_folder, "pred10x", dict(max_new_tokens=120,
                                                                  record=True),
                          dict(batch_size=2, pool_size=1024), check_pdiff("pred10x"),
                          run=run_pdiff),
    "sot": Case("sot", sot_folder, None,
                dict(max_skeleton_tokens=10, max_point_tokens=6, stop_at_newline=False,
                     record_logits=True, max_new_tokens=30),
                dict(batch_size=2), check_sot),
}


def test_every_registered_system_has_a_case():
    assert {c.system for c in CASES.values()} >= set(decode_systems())


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made: dict[tuple, str] = {}

    def get(case: Case) -> str:
        key = (case.folder, case.positions)
        if key not in made:
            made[key] = case.folder(tmp_path_factory.mktemp("model"), case.positions)
        return made[key]
    return get


ENGINE_VARIANTS = [(name, "off") for name in sorted(ENGINES)] + [("llama.cpp", "on")]


@pytest.mark.parametrize("engine,flash", ENGINE_VARIANTS,
                         ids=[f"{e}" + ("+flash" if f == "on" else "") for e, f in
                              ENGINE_VARIANTS])
@pytest.mark.parametrize("case_name", sorted(CASES))
def test_every_system_on_every_engine_equals_the_oracle_or_is_refused_by_name(
        case_name, engine, flash, folders, monkeypatch, tmp_path):
    """`flash`: llama.cpp's flash attention (`solm.engines.cost.flash_attn_here`)."""
    from solm.decode.sot import runtime as sot_runtime
    from solm.engines.cost import FLASH_ENV

    monkeypatch.setenv(FLASH_ENV, flash)

    case = CASES[case_name]
    system = decode_system(case.system)
    model_dir = folders(case)  # before the cache moves: the embedded tokenizer is in the real one
    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))  # the GGUF exports go here
    monkeypatch.setattr(sot_runtime, "parse_skeleton", lambda text: ["Apples", "Pears",
                                                                     "Plums"])
    config = system.config_cls(sampling=GREEDY, **case.config)
    settings = system.engine_cls(engine=engine, gguf_type="f32", onnx_type="fp32",
                                   **case.settings)
    if ENGINES[engine].unavailable():
        pytest.skip(ENGINES[engine].unavailable())
    try:
        system.prepare(config, settings, model_dir)
    except SolmError as refused:
        # the refusal names the engine, and is the engine's own word on this decode
        assert str(refused).startswith(f"--engine {engine}:"), refused
        assert not ENGINES[engine].reference  # the reference runs every decode
        return
    assert settings.engine == engine
    asked = []
    own_step = ENGINES[engine].step

    def step(kind, *args, **kwargs):
        asked.append(kind)
        return own_step(kind, *args, **kwargs)

    monkeypatch.setattr(ENGINES[engine], "step", step)
    model, tok = system.load(model_dir, settings, "fp32", "cpu")
    jobs, _ = pending_jobs([Record(str(i), p) for i, p in enumerate(PROMPTS)], tok, set())
    runner = system.runner(model, tok, config, settings, len(jobs), False)
    results = (case.run(runner, jobs, tok) if case.run else
               {d.rid: d.result for d in runner.run(jobs)})
    assert set(results) == {job.rid for job in jobs}
    # the system asked its engine for the step its runtime speaks, and got one from an
    # engine that does not run solm's own torch steps
    assert asked == [STEP_OF[case.system]]
    assert ENGINES[engine].torch_step or runner_step(runner) is not None
    case.check(model, tok, jobs, results, runner)


def test_the_refused_cells_are_the_ones_llama_cpp_cannot_express(folders):
    """Which cells the matrix expects refused, written down: the Pred-10X layouts' jumps
    (PASTA's parallel threads, Planned Diffusion's chunks) and H2O's single-token drops on
    llama.cpp; H2O's attention scores on onnxruntime (its graph takes any mask, so every
    layout runs); nothing on torch."""
    from solm.decode.tip.policies import make_policy

    expected = {("pasta-pred10x", "llama.cpp"), ("pdiff-pred10x", "llama.cpp"),
                ("tip-h2o", "llama.cpp"), ("tip-h2o", "onnxruntime")}
    found = set()
    for name, case in CASES.items():
        system = decode_system(case.system)
        config = system.config_cls(sampling=GREEDY, **case.config)
        for engine, e in ENGINES.items():
            settings = system.engine_cls(engine=engine, gguf_type="f32", onnx_type="fp32",
                                         **case.settings)
            policy = (make_policy(config.policy, config.budget, settings.page_size)
                      if case.system == "tip" else None)
            if e.refusal(case.system, config=config, settings=settings, model=folders(case),
                         policy=policy):
                found.add((name, engine))
    assert found == expected


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_prompts_prefilled_in_short_runs_on_onnxruntime_equal_the_oracle(
        case_name, folders, monkeypatch, tmp_path):
    """A prompt is prefilled in runs of PREFILL_ROWS rows (each run's bias is rows x cells
    read, never prompt x prompt): with runs of 3 rows, every system's decode still equals
    the oracle."""
    from solm.engines.onnxruntime import step

    if ENGINES["onnxruntime"].unavailable():
        pytest.skip(ENGINES["onnxruntime"].unavailable())
    runs = []
    chunks = step.prefill_chunks

    def counted(groups, total, size=None):
        for run in chunks(groups, total, size):
            runs.append(run[1] - run[0])
            yield run

    monkeypatch.setattr(step, "PREFILL_ROWS", 3)
    monkeypatch.setattr(step, "prefill_chunks", counted)
    test_every_system_on_every_engine_equals_the_oracle_or_is_refused_by_name(
        case_name, "onnxruntime", "off", folders, monkeypatch, tmp_path)
    if STEP_OF[CASES[case_name].system] in ("slots", "pdiff", "pool"):
        assert runs and max(runs) <= 3
