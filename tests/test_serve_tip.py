"""solm serve --system tip, in process (tiny TIP model): concurrent requests decode together on
the paged runtime, each answer reports its own live KV, registers are stripped from the text,
streaming sends the same text, and PASTA-only fields are 400s."""

import json
import threading

import pytest
from fastapi.testclient import TestClient

from conftest import TIP_REGISTERS, cancel_a_running_job
from solm.core.sampling import SamplingConfig
from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipRuntime
from solm.serve.app import ServeSettings, create_app
from solm.serve.tip_engine import TipServeEngine

MODEL = "tiny-tip"


@pytest.fixture(scope="module")
def client(tip_model, tip_tok):
    rt = TipRuntime(tip_model, tip_tok, num_pages=256, page_size=4,
                    num_registers=TIP_REGISTERS)
    defaults = TipDecodeConfig(policy="tip", max_new_tokens=24,
                               sampling=SamplingConfig(temperature=1.0, seed=3))
    engine = TipServeEngine(rt, defaults, max_queue=8, max_batch=4)
    engine.start_in_thread()
    app = create_app(engine, ServeSettings(MODEL, defaults))
    with TestClient(app) as c:
        yield c, rt


def test_concurrent_requests_each_report_their_live_kv(client):
    c, rt = client
    answers = [None] * 6

    def ask(i):
        answers[i] = c.post("/v1/completions", json={"model": MODEL, "prompt": f"Q{i}: 2+{i}?",
                                                     "max_tokens": 12 + i, "seed": i})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, r in enumerate(answers):
        assert r.status_code == 200, r.text
        body = r.json()
        fig = body["solm"]
        assert body["usage"]["completion_tokens"] <= 12 + i
        assert fig["policy"] == "tip" and fig["mean_live_tokens"] > 0
        assert fig["peak_live_tokens"] >= fig["mean_live_tokens"]
        assert "<reg_" not in body["choices"][0]["text"]
    assert rt.allocator.in_use == 0  # every request's pages went back


def test_the_same_request_alone_gives_the_runtimes_own_answer(client, tip_model, tip_tok):
    """Batched with others or alone on a fresh runtime, a seeded request samples the same."""
    c, _ = client
    r = c.post("/v1/completions", json={"model": MODEL, "prompt": "Tell me 3 things.",
                                        "max_tokens": 10, "seed": 7, "temperature": 0.8})
    fig = r.json()["solm"]
    solo = TipRuntime(tip_model, tip_tok, num_pages=64, page_size=4,
                      num_registers=TIP_REGISTERS)
    from solm.core.chat import text_ids
    (res,) = solo.run([TipRequest(0, text_ids(tip_tok, "Tell me 3 things."))],
                      TipDecodeConfig(policy="tip", max_new_tokens=10,
                                      sampling=SamplingConfig(temperature=0.8, seed=7)))
    assert fig["annotated"] == tip_tok.decode(res.ids, skip_special_tokens=True)
    assert fig["mean_live_tokens"] == round(res.mean_live_tokens, 2)


def test_streaming_sends_the_answer(client):
    c, _ = client
    body = {"model": MODEL, "prompt": "Count.", "max_tokens": 16, "seed": 2}
    whole = c.post("/v1/completions", json=body).json()["choices"][0]["text"]
    with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == whole


@pytest.mark.parametrize("field,value", [("mode", "parallel"), ("compare", True),
                                         ("logprobs", 2), ("repetition_penalty", 1.3),
                                         ("no_repeat_ngram", 3)])
def test_pasta_fields_are_400s(client, field, value):
    c, _ = client
    r = c.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2,
                                        field: value})
    assert r.status_code == 400, r.text
    if field != "logprobs":  # the error names the field the request set
        assert r.json()["error"]["param"] == field, r.text


def test_a_running_request_that_is_cancelled_leaves_the_session_and_is_counted(tip_model,
                                                                                tip_tok):
    rt = TipRuntime(tip_model, tip_tok, num_pages=256, page_size=4,
                    num_registers=TIP_REGISTERS)
    long = TipDecodeConfig(policy="tip", max_new_tokens=300)  # greedy
    engine = TipServeEngine(rt, long, max_queue=4, max_batch=2)
    engine.start_in_thread()
    cancel_a_running_job(engine, tip_tok("What is 2 + 3?")["input_ids"], long, 300)
