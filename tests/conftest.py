import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# one intra-op thread (inherited by the CLI processes tests start): the tiny models gain
# little from a second one, and on a busy 2-core machine a second OpenMP thread per process
# oversubscribes the cores (measured, AMD EPYC 2 cores, pdiff runtime + oracles + compiled
# step tests: 99 s quiet / 265 s beside a 2-thread torch process with 2 threads; 126 s /
# 131 s with 1). SOLM_TEST_THREADS (or an OMP_NUM_THREADS already set) overrides it.
os.environ["OMP_NUM_THREADS"] = (os.environ.get("SOLM_TEST_THREADS")
                                 or os.environ.get("OMP_NUM_THREADS") or "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

from hypothesis import settings as _hypothesis_settings  # noqa: E402

# no wall-clock deadlines: property tests must pass on a busy 2-core machine, where one
# example can take 10-50x longer than on a quiet one
_hypothesis_settings.register_profile("solm", deadline=None)
_hypothesis_settings.load_profile("solm")

# llama.cpp's flash attention as solm's tests expect it, whatever `solm bench step` measured
# on this machine (the matrix test runs it on as well)
os.environ.setdefault("SOLM_LLAMA_FLASH_ATTN", "off")



@pytest.fixture(autouse=True)
def _own_measurement_records(tmp_path_factory, monkeypatch):
    """`--engine auto` reads what `solm bench step` and finished decodes recorded in solm's
    cache; a test sees only the records it (or its SOLM_CACHE) writes, never the user's or
    another test's (a machine where onnxruntime had been measured fastest made the demo test
    pick it)."""
    from solm.engines import cost

    records = tmp_path_factory.mktemp("records")
    real = cost._cache

    def cache(name: str):
        return real(name) if os.environ.get("SOLM_CACHE") else records / name

    monkeypatch.setattr(cost, "_cache", cache)


TIP_REGISTERS = 4  # registers of the TIP test tokenizer
SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture(scope="session")
def pasta_tokenizer():
    from solm.core.vocabulary import add_control_tokens
    from solm.core.models import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")
    return tok


@pytest.fixture(scope="session")
def vocab(pasta_tokenizer):
    from solm.core.systems.pasta import PastaVocab

    return PastaVocab.from_tokenizer(pasta_tokenizer)


@pytest.fixture(scope="session")
def tiny(pasta_tokenizer):
    from solm.core.models import tiny_model

    model, _ = tiny_model(pasta_tokenizer, seed=0)
    return model


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """A tiny random llama saved like any HF checkpoint (tokenizer without control tokens)."""
    from solm.core.models import load_tokenizer, tiny_model

    folder = tmp_path_factory.mktemp("tiny")
    tok = load_tokenizer("smollm2-135m")
    model, _ = tiny_model(tok, seed=1)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def tip_tok():
    """The embedded tokenizer with TIP_REGISTERS register tokens."""
    from solm.core.vocabulary import add_control_tokens
    from solm.core.models import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "tip", num_registers=TIP_REGISTERS)
    return tok


@pytest.fixture(scope="session")
def tip_model(tip_tok):
    from solm.core.models import tiny_model

    model, _ = tiny_model(tip_tok, seed=2)
    return model


def shared_path(*parts: str) -> str:
    return os.path.join(SHARED, *parts)


# an answer in paragraphs, three of them long enough to fork (own answers, speed shape)
PARAGRAPHS = ("Planning a trip can be hard, so here are three places to start with.\n\n"
              "First, Iceland. Its glaciers and black beaches make it a place unlike any "
              "other, and the hot springs are open all year round for every visitor.\n\n"
              "Next, Norway. The fjords are deep and quiet, the trains run along the coast, "
              "and the towns are small enough to walk across in an afternoon.\n\n"
              "Finally, the Alps. Villages sit under the peaks, the lakes are clear, and the "
              "trails go from easy walks to long climbs for the experienced.")

SAMPLE = os.path.join(os.path.dirname(__file__), "data", "instruct_sample.jsonl")


def sample_records(n: int):
    """n records from the committed instruct sample (tests/data/SOURCE.md), cycled with fresh
    ids when n is larger than the sample: real responses without ../shared."""
    from dataclasses import replace

    from solm.core.records import load_records

    base = list(load_records(SAMPLE))
    return [replace(base[i % len(base)], id=f"{base[i % len(base)].id}~{i // len(base)}")
            for i in range(n)]



@pytest.fixture(scope="session")
def pdiff_tok():
    """The embedded tokenizer with Planned Diffusion's tokens (Pasta-Lang + mask + pad)."""
    from solm.core.vocabulary import add_control_tokens
    from solm.core.models import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pdiff")
    return tok


@pytest.fixture(scope="session")
def pdiff_vocab(pdiff_tok):
    from solm.core.systems.pdiff import PdiffVocab

    return PdiffVocab.from_tokenizer(pdiff_tok)


@pytest.fixture(scope="session")
def pdiff_model(pdiff_tok):
    from solm.core.models import tiny_model

    model, _ = tiny_model(pdiff_tok, seed=3)
    return model


def cancel_a_running_job(engine, prompt: list[int], config, max_new_tokens: int) -> None:
    """On a started serving engine: the job left alone runs `max_new_tokens`; the same job
    cancelled once it decodes leaves the batch, is counted in `cancelled_total`, and is
    answered with what it has (or 499 if nothing), never its full length."""
    import asyncio

    from solm.serve.engine import ServeJob

    async def go():
        uncancelled = ServeJob(prompt, config)
        engine.submit(uncancelled)
        kind, full = await uncancelled.events.get()
        assert (kind, full.completion_tokens) == ("done", max_new_tokens)
        job = ServeJob(prompt, config)
        engine.submit(job)
        while not engine.live:  # taken and decoding
            await asyncio.sleep(0.005)
        job.cancelled.set()
        kind, payload = await job.events.get()
        assert not engine.live and engine.cancelled_total == 1
        assert kind == "error" and payload.status_code == 499 or \
            kind == "done" and payload.completion_tokens < max_new_tokens, (kind, payload)

    asyncio.run(go())
