"""The server's engine without HTTP: streamed text is final in reading order and adds up to
the answer, incomplete characters are held back, logprobs describe the chosen tokens, and
the queue bound refuses instead of growing."""

import asyncio

import pytest

from conftest import cancel_a_running_job
from solm.core.chat import text_ids
from solm.core.pasta_lang import strip
from solm.core.sampling import SamplingConfig
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime, replay_scripts
from solm.serve.engine import ServeJob, QueueFull, ServeEngine
from solm.serve.streaming import TextStream, token_bytes

TEXT = ('Tips:\n1.<promise topic="sleep" tokens="2"/><async> Sleep eight hours every night and '
        'keep a regular schedule.</async>\n2.<promise topic="food" tokens="1"/><async> Eat '
        'greens.</async><sync/> Done.')


def scripted_chooser(streams: dict[int, list[int]], eos: int):
    """Each thread writes its recorded stream, then main ends: a PASTA answer decoded
    through the real (non-replay) scheduling path, whatever the tiny model predicts."""

    def choose(thread, logits, state):
        stream = streams[thread.tid]
        return stream[len(thread.fed)] if len(thread.fed) < len(stream) else eos

    return choose


def started(engine: ServeEngine) -> ServeEngine:
    engine.start_in_thread()
    return engine


def run_job(engine: ServeEngine, job: ServeJob) -> list:
    async def go():
        engine.submit(job)
        events = []
        while True:
            kind, payload = await job.events.get()
            events.append((kind, payload))
            if kind != "delta":
                return events

    return asyncio.run(go())


@pytest.fixture()
def runtime(tiny, pasta_tokenizer):
    return PastaRuntime(tiny, pasta_tokenizer, pool_size=512)


def test_stream_sends_final_text_in_reading_order_and_adds_up(runtime, pasta_tokenizer, vocab,
                                                              monkeypatch):
    resp = text_ids(pasta_tokenizer, TEXT)
    streams, _ = replay_scripts(resp, vocab)
    monkeypatch.setattr(runtime, "chooser",
                        lambda cfg: scripted_chooser(streams, vocab.eos[0]))
    cfg = PastaDecodeConfig(max_new_tokens=len(resp) + 5, max_fork_tokens=len(resp))
    events = run_job(started(ServeEngine(runtime)), ServeJob([1, 2, 3], cfg, stream=True))
    kind, outcome = events[-1]
    assert kind == "done"
    deltas = [text for k, (text, _) in events[:-1]]
    assert outcome.text == strip(TEXT)
    assert "".join(deltas) == outcome.text
    # a block is sent whole, once finished: the delta that starts it carries all of it
    block = " Sleep eight hours every night and keep a regular schedule."
    start = strip(TEXT).index(block)
    sent, crossed = "", 0
    for d in deltas:
        if len(sent) <= start < len(sent) + len(d):
            assert (sent + d).startswith(strip(TEXT)[:start] + block)
            crossed += 1
        sent += d
    assert crossed == 1
    assert len(deltas) > 3
    assert outcome.figures["threads"] == 2 and outcome.finish_reason == "stop"
    assert outcome.figures["critical_path"] < outcome.figures["total_tokens"]


def test_incomplete_characters_are_held_back(pasta_tokenizer):
    text = "Fruit: 🍎🍐 and 日本 tea."
    ids = text_ids(pasta_tokenizer, text)
    stream, pieces = TextStream(pasta_tokenizer), []
    for n in range(1, len(ids) + 1):
        pieces.append(stream.update(ids[:n]))
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == text
    assert b"".join(token_bytes(pasta_tokenizer, i) for i in ids) == text.encode()


def test_logprobs_describe_each_chosen_token(runtime, pasta_tokenizer):
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=12,
                            sampling=SamplingConfig(temperature=0.0))
    events = run_job(started(ServeEngine(runtime)), ServeJob([1, 2, 3, 4], cfg, top_k=3))
    kind, outcome = events[-1]
    assert kind == "done" and len(outcome.logprobs) == outcome.completion_tokens == 12
    for entry in outcome.logprobs:
        assert len(entry.top) == 3
        assert entry.top[0][0] == entry.token_id  # greedy picks the most likely token
        assert entry.logprob == pytest.approx(entry.top[0][1])
        assert entry.top[0][1] >= entry.top[1][1] >= entry.top[2][1]
    ids = [e.token_id for e in outcome.logprobs]
    assert outcome.text == pasta_tokenizer.decode(ids, skip_special_tokens=True)
    assert outcome.finish_reason == "length"


def test_a_full_queue_refuses_and_a_cancelled_job_is_skipped(runtime):
    engine = started(ServeEngine(runtime, max_queue=2))
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=4)

    async def go():
        engine.lock.acquire()  # the worker is busy: queued jobs wait
        try:
            jobs = [ServeJob([1, 2, 3], cfg) for _ in range(3)]
            engine.submit(jobs[0])
            # the worker takes jobs[0] off the queue, then blocks on the lock; wait for that
            # rather than for a fixed time (a busy machine can take longer than any)
            while not engine.jobs.empty():
                await asyncio.sleep(0.01)
            engine.submit(jobs[1])
            engine.submit(jobs[2])
            with pytest.raises(QueueFull):
                engine.submit(ServeJob([1, 2, 3], cfg))
            jobs[1].cancelled.set()
        finally:
            engine.lock.release()
        kinds = [(await j.events.get())[0] for j in (jobs[0], jobs[2])]
        assert kinds == ["done", "done"]
        assert jobs[1].events.empty()
        assert engine.cancelled_total == 1  # what /health reports

    asyncio.run(go())


def test_a_running_job_that_is_cancelled_leaves_the_batch_and_is_counted(runtime):
    engine = started(ServeEngine(runtime, max_queue=2))
    cancel_a_running_job(engine, [1, 2, 3], PastaDecodeConfig(mode="sequential",
                                                              max_new_tokens=400), 400)

    async def after_it():
        after = ServeJob([1, 2, 3], PastaDecodeConfig(mode="sequential", max_new_tokens=4))
        engine.submit(after)
        assert (await after.events.get())[0] == "done"
        assert engine.cancelled_total == 1

    asyncio.run(after_it())


@pytest.mark.parametrize("seed", range(4))
def test_cancelled_queued_jobs_are_counted_once_and_the_rest_answered(runtime, seed):
    """Jobs queued behind a busy worker, a random share of them cancelled before they start:
    each cancelled one is counted once and never answered, every other one is answered in
    full, in any mix (the count /health reports, written another way: the flags set)."""
    import random

    rng = random.Random(seed)
    engine = started(ServeEngine(runtime, max_queue=16, max_batch=rng.choice([1, 2, 4])))
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=3)

    async def go():
        jobs = [ServeJob([1, 2, 3 + i], cfg) for i in range(rng.randint(2, 8))]
        engine.lock.acquire()  # the worker waits: every job below is still queued
        try:
            for job in jobs:
                engine.submit(job)
            cancelled = [j for j in jobs if rng.random() < 0.5]
            for job in cancelled:
                job.cancelled.set()
        finally:
            engine.lock.release()
        for job in jobs:
            if job in cancelled:
                continue
            kind, outcome = await job.events.get()
            assert kind == "done" and outcome.completion_tokens == 3
        while not engine.jobs.empty() or engine.live:
            await asyncio.sleep(0.01)
        assert all(j.events.empty() for j in cancelled)
        assert engine.cancelled_total == len(cancelled)

    asyncio.run(go())


def test_a_job_cancelled_before_its_first_token_is_answered_499_and_counted(runtime):
    """Driven step by step (no worker thread, so no race): admitted, then cancelled before
    any pass; it leaves the batch with nothing written, is answered 499 (the status a
    client that went away gets) and counted once."""
    from solm.serve.openai_schema import ApiError

    async def go():
        engine = ServeEngine(runtime)
        job = ServeJob([1, 2, 3], PastaDecodeConfig(mode="sequential", max_new_tokens=8))
        engine.submit(job)
        with engine.lock:
            engine._take(None)
            assert len(engine.live) == 1
            job.cancelled.set()
            for _ in range(3):
                if engine.live:
                    engine._step()
        assert not engine.live and engine.cancelled_total == 1
        kind, payload = await job.events.get()
        assert kind == "error" and isinstance(payload, ApiError)
        assert payload.status_code == 499 and job.events.empty()

    asyncio.run(go())


def test_streamed_logprobs_arrive_once_each_and_no_chunk_is_empty(runtime, pasta_tokenizer):
    """A streamed sequential answer with logprobs: every chunk carries text or log-probs
    (none is empty), and the chunks' log-probs, joined, are the answer's, one per token."""
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=10,
                            sampling=SamplingConfig(temperature=0.0))
    events = run_job(started(ServeEngine(runtime)), ServeJob([1, 2, 3, 4], cfg, top_k=2,
                                                             stream=True))
    kind, outcome = events[-1]
    chunks = [payload for k, payload in events[:-1]]
    assert kind == "done" and chunks and all(k == "delta" for k, _ in events[:-1])
    assert all(text or logprobs for text, logprobs in chunks), chunks
    sent = [e.token_id for _, logprobs in chunks for e in logprobs]
    assert sent == [e.token_id for e in outcome.logprobs] and len(sent) == 10
    assert "".join(text for text, _ in chunks) == outcome.text


def test_a_stream_cancelled_midway_ends_with_what_it_sent_and_no_empty_chunk(runtime):
    """Cancelled after three passes (driven step by step): every token it wrote was already
    streamed, so its answer ends with no further chunk, and what was sent is the answer."""

    async def go():
        engine = ServeEngine(runtime)
        cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=20,
                                sampling=SamplingConfig(temperature=0.0))
        job = ServeJob([1, 2, 3, 4], cfg, top_k=2, stream=True)
        engine.submit(job)
        with engine.lock:
            engine._take(None)
            for _ in range(3):
                engine._step()
            job.cancelled.set()
            for _ in range(3):
                if engine.live:
                    engine._step()
        events = []
        while not events or events[-1][0] == "delta":
            events.append(await job.events.get())
        return events

    events = asyncio.run(go())
    kind, outcome = events[-1]
    chunks = [payload for _, payload in events[:-1]]
    assert kind == "done" and 0 < outcome.completion_tokens < 20
    assert all(text or logprobs for text, logprobs in chunks), chunks
    assert [e.token_id for _, lp in chunks for e in lp] == [e.token_id for e in outcome.logprobs]


@pytest.mark.parametrize("queued,max_batch", [(3, 4), (4, 4), (6, 4), (5, 1)])
def test_the_batch_takes_as_many_queued_jobs_as_it_has_room_for(runtime, queued, max_batch):
    async def go():
        engine = ServeEngine(runtime, max_batch=max_batch)
        cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=4)
        for _ in range(queued):
            engine.submit(ServeJob([1, 2, 3], cfg))
        with engine.lock:
            engine._take(None)
        assert len(engine.live) == min(queued, max_batch)
        assert engine.jobs.qsize() == queued - min(queued, max_batch)

    asyncio.run(go())
