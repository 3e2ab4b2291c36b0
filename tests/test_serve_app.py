"""The HTTP side in process (tiny model): client mistakes are 400s naming the field, usage
never counts more tokens than asked for, and a shutdown answers every job (an error for the
ones it cancels) and refuses new ones."""

import asyncio
import threading

import pytest
from fastapi.testclient import TestClient

from solm.core.sampling import SamplingConfig
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime
from solm.serve.app import ServeSettings, create_app
from solm.serve.engine import ServeJob, ServeEngine, ShuttingDown
from solm.serve.openai_schema import ApiError

POOL = 96
MODEL = "tiny"


@pytest.fixture(scope="module")
def client(tiny, pasta_tokenizer):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=POOL)
    engine = ServeEngine(rt, max_queue=4)
    engine.start_in_thread()
    app = create_app(engine, ServeSettings(MODEL, PastaDecodeConfig(max_new_tokens=64)))
    with TestClient(app) as c:
        yield c


def completion(client, **body):
    return client.post("/v1/completions", json={"model": MODEL, **body})


BAD = [
    ("seed over 2^32", {"prompt": "Hi", "seed": 2**70}, "seed"),
    ("negative seed", {"prompt": "Hi", "seed": -1}, "seed"),
    ("empty prompt list", {"prompt": []}, "prompt"),
    ("empty prompt text", {"prompt": ""}, "prompt"),
    ("token id over the vocabulary", {"prompt": [99999999]}, "prompt"),
    ("negative token id", {"prompt": [-1, 5]}, "prompt"),
    ("prompt over the pool", {"prompt": [5] * (POOL + 10)}, "prompt"),
]


@pytest.mark.parametrize("name,body,param", BAD, ids=[b[0] for b in BAD])
def test_client_mistakes_are_400s_naming_the_field(client, name, body, param):
    r = completion(client, max_tokens=4, **body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert completion(client, prompt="Hi", max_tokens=2).status_code == 200


def test_chat_over_the_pool_names_messages(client):
    r = client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "word " * (POOL * 2)}]})
    assert r.status_code == 400
    assert r.json()["error"] == {**r.json()["error"], "param": "messages",
                                 "code": "context_length_exceeded"}


@pytest.mark.parametrize("seed", range(6))
def test_completion_tokens_never_exceed_max_tokens(client, seed):
    """Sampling at temperature 2 from a random model writes promises and blocks, whose
    forced tags count too: usage stays within max_tokens and says `length` at the cap."""
    for cap in (1, 3, 16):
        r = completion(client, prompt="Name three fruits.", max_tokens=cap, temperature=2.0,
                       seed=seed)
        assert r.status_code == 200, r.text
        usage, choice = r.json()["usage"], r.json()["choices"][0]
        assert usage["completion_tokens"] <= cap
        assert usage["completion_tokens"] == r.json()["solm"]["total_tokens"]
        if usage["completion_tokens"] < cap - 2:
            assert choice["finish_reason"] == "stop"


def test_shutdown_cancels_running_and_queued_jobs_with_an_error(tiny, pasta_tokenizer):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=4096)
    engine = ServeEngine(rt, max_queue=4)
    long = PastaDecodeConfig(mode="sequential", max_new_tokens=3000,
                             sampling=SamplingConfig(temperature=1.0))

    async def go():
        jobs = [ServeJob([1, 2, 3], long) for _ in range(2)]
        for j in jobs:
            engine.submit(j)
        worker = threading.Thread(target=engine.work, daemon=True)
        worker.start()
        await asyncio.sleep(0.3)  # the first job is decoding, the second waits
        engine.shutdown(grace_s=0.2)
        with pytest.raises(ShuttingDown):
            engine.submit(ServeJob([1, 2, 3], long))
        events = [await j.events.get() for j in jobs]
        await asyncio.to_thread(worker.join, 300)
        return events, worker.is_alive()

    events, alive = asyncio.run(go())
    # the running job is cancelled, not let finish its 3,000 tokens (that would answer "done")
    assert [k for k, _ in events] == ["error", "error"]
    assert all(isinstance(e, ApiError) and e.status_code == 503 for _, e in events)
    assert not alive


def test_shutdown_lets_a_job_finish_within_the_grace_period(tiny, pasta_tokenizer):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    engine = ServeEngine(rt, max_queue=4)
    short = PastaDecodeConfig(mode="sequential", max_new_tokens=8)

    async def go():
        job = ServeJob([1, 2, 3], short)
        engine.submit(job)
        engine.shutdown(grace_s=30)
        worker = threading.Thread(target=engine.work, daemon=True)
        worker.start()
        kind, outcome = await job.events.get()
        await asyncio.to_thread(worker.join, 10)
        return kind, outcome, worker.is_alive()

    kind, outcome, alive = asyncio.run(go())
    assert kind == "done" and outcome.completion_tokens == 8 and not alive


def test_a_pasta_answer_never_exceeds_its_token_cap(tiny, pasta_tokenizer, vocab):
    """A real PASTA answer (two promised blocks) decoded through the non-replay path under
    every cap: the answer, forced `<async>` and inserted `</async>` included, fits the cap."""
    from solm.core.chat import text_ids
    from solm.decode.pasta.runtime import replay_scripts
    from test_serve_engine import TEXT, scripted_chooser

    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    resp = text_ids(pasta_tokenizer, TEXT)
    streams, _ = replay_scripts(resp, vocab)
    forked = 0
    for cap in range(1, len(resp) + 3):
        cfg = PastaDecodeConfig(max_new_tokens=cap, max_fork_tokens=len(resp))
        state = rt.prefill([1, 2, 3], cfg, scripted_chooser(streams, vocab.eos[0]))
        while rt.step(state):
            pass
        res = rt.finish(state)
        assert len(res.ids) <= cap, (cap, pasta_tokenizer.decode(res.ids))
        forked += res.threads > 0
        if cap >= len(resp):
            assert res.ids == resp
    assert forked > len(resp) // 2  # most caps cut the answer after a block opened


def _drain_script(engine, make_job) -> tuple[list, int]:
    """Driven step by step while the server drains (no worker thread, no race): job 1's
    client goes away while it runs, job 2's while it waits, job 3 is still running when the
    grace period ends. The ones whose client went away are what /health counts; the one
    the shutdown stopped is answered 503 and not counted."""
    async def go():
        jobs = [make_job() for _ in range(3)]
        for job in jobs:
            engine.submit(job)
        with engine.lock:
            engine._take(None)  # max_batch 1: job 1 runs, 2 and 3 wait
            engine.draining.set()  # shutting down: the queued ones may still finish
            engine._step()
            jobs[0].cancelled.set()
            for _ in range(4):
                if engine.live:
                    engine._step()
            jobs[1].cancelled.set()
            engine._take(None)  # job 2 is skipped (its client left), job 3 starts
            engine._step()
            engine.abort.set()  # the grace period is over
            for _ in range(4):
                if engine.live:
                    engine._step()
        await asyncio.sleep(0.05)  # the answers are put on this loop's queues by callbacks
        events = [j.events.get_nowait() if not j.events.empty() else None for j in jobs]
        return events, engine.cancelled_total

    return asyncio.run(go())


@pytest.mark.parametrize("system", ["pasta", "tip"])
def test_while_draining_only_clients_that_went_away_are_counted_as_cancelled(
        system, tiny, pasta_tokenizer, tip_model, tip_tok):
    from conftest import TIP_REGISTERS
    from solm.decode.tip.runtime import TipDecodeConfig, TipRuntime
    from solm.serve.tip_engine import TipServeEngine

    if system == "pasta":
        engine = ServeEngine(PastaRuntime(tiny, pasta_tokenizer, pool_size=4096), max_queue=4,
                             max_batch=1)
        cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=3000,
                                sampling=SamplingConfig(temperature=1.0))
    else:
        cfg = TipDecodeConfig(policy="tip", max_new_tokens=3000,
                              sampling=SamplingConfig(temperature=1.0, seed=3))
        engine = TipServeEngine(TipRuntime(tip_model, tip_tok, num_pages=4096, page_size=4,
                                           num_registers=TIP_REGISTERS), cfg, max_queue=4,
                                max_batch=1)
    events, cancelled = _drain_script(engine, lambda: ServeJob([1, 2, 3], cfg))
    assert cancelled == 2
    first, second, third = events
    # the client that left mid-answer gets what was written (or 499 before any token)
    assert first[0] == "done" or (first[0] == "error" and first[1].status_code == 499)
    assert second is None  # never started, never answered: its client is gone
    assert third[0] == "error" and third[1].status_code == 503
