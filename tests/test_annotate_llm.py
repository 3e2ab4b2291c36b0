"""The LLM annotation pipeline against a local fake server, through the real SDK clients."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import sample_records
from fake_llm_server import FakeLLM
from solm.annotate.llm_job import (LLMAnnotateConfig, Rejection, annotate_with_llm,
                                   check_annotation)
from solm.annotate.prompt import demonstrations, prompt_version, system_prompt
from solm.core.jsonl import read_jsonl
from solm.core.llm import make_client, parse_spec
from solm.core.llm.base import redact
from solm.core.llm.jobs import TokenBucket
from solm.core.pasta_lang import faithful, validate
from solm.core.records import Record

SECRET = "sk-test-SECRET-123456"


@pytest.fixture(scope="module")
def count(pasta_tokenizer):
    return lambda s: len(pasta_tokenizer(s, add_special_tokens=False).input_ids)


def records(n, prefix="r"):
    body = ("Intro line for the answer.\n\n1. First point: " + "alpha beta gamma delta " * 5 +
            "\n2. Second point: " + "one two three four five six " * 4 + "\n\nIn short, done.")
    return [Record(f"{prefix}{i}", f"question {i}", body.replace("alpha", f"alpha{i}"))
            for i in range(n)]


def run(client, recs, tmp_path, count, **cfg):
    out, rej = tmp_path / "out.jsonl", tmp_path / "rej.jsonl"
    summary = asyncio.run(annotate_with_llm(recs, client, out, rej, count,
                                            LLMAnnotateConfig(**cfg)))
    return summary, list(read_jsonl(out)) if out.exists() else [], \
        list(read_jsonl(rej)) if rej.exists() else []


def test_demonstrations_are_valid_faithful_and_diverse(count):
    demos = demonstrations()
    assert len(demos) == 7 and len({d.name for d in demos}) == 7
    for d in demos:
        assert not validate(d.annotated) and faithful(d.annotated, d.response)
    assert sum(1 for d in demos if "<promise" not in d.annotated) >= 1  # nothing-to-parallelise
    assert prompt_version().startswith("pasta-v1-") and "Example 7" in system_prompt()


def test_spec_parsing():
    assert parse_spec("openai:gpt-4o@http://h:1/v1") == ("openai", "gpt-4o", "http://h:1/v1")
    assert parse_spec("gemini:gemini-1.5-flash") == ("gemini", "gemini-1.5-flash", None)
    with pytest.raises(Exception, match="bad backend spec"):
        parse_spec("claude:x")


def served_to(server: FakeLLM, rec: Record) -> list:
    """What the fake server served the requests for one record (None: a clean reply)."""
    logs = [log for user, log in server.served.items() if rec.response in user]
    assert len(logs) <= 1
    return logs[0] if logs else []


def annotated_within(served: list, max_tries: int) -> bool:
    """The retry rule written from the server's side: every fault is retried, so a row is
    annotated iff one of its first `max_tries` asks got a clean reply, and then it is the
    last ask."""
    clean = [i for i, fault in enumerate(served[:max_tries]) if fault is None]
    if clean:
        assert clean[0] == len(served) - 1, f"asked again after a clean reply: {served}"
    else:
        assert len(served) == max_tries, f"gave up before its {max_tries} tries: {served}"
    return bool(clean)


@pytest.mark.parametrize("backend", ["gemini", "openai"])
def test_faults_are_retried_and_nothing_is_lost(backend, tmp_path, count, monkeypatch):
    """Faults are drawn per request text, so which rows end annotated is decided by the retry
    rule, not by how requests interleave (seed 1 with 3 tries leaves some rows rejected); the
    slow fault outlasts a timeout that leaves a busy machine ample time for an ordinary reply."""
    monkeypatch.setenv("GEMINI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with FakeLLM(count, fault_rate=0.3, seed=1, slow_s=12.0) as server:
        client = make_client(f"{backend}:fake-model@{server.url}", timeout=6.0)
        recs = records(40)
        summary, out, rej = run(client, recs, tmp_path, count, concurrency=8, max_tries=3,
                                base_delay=0.05, max_delay=0.5)
        assert server.api_keys == {SECRET}
    assert len(server.fault_counts) >= 5, server.fault_counts
    expected = sorted(r.id for r in recs if annotated_within(served_to(server, r), 3))
    assert sorted(r["id"] for r in out) == expected
    assert sorted(r["id"] for r in rej) == sorted(set(r.id for r in recs) - set(expected))
    assert rej and all(r["tries"] == 3 for r in rej)
    assert all(faithful(r["annotated"], r["response"]) for r in out)
    assert summary.retries and summary.input_tokens > 0
    text = (tmp_path / "out.jsonl").read_text() + (tmp_path / "rej.jsonl").read_text()
    assert SECRET not in text


def test_unfaithful_annotations_are_rejected_with_a_reason(tmp_path, count, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    recs = records(4)
    recs[1].response += " MARKER"
    with FakeLLM(count, unfaithful_marker="MARKER") as server:
        client = make_client(f"openai:m@{server.url}", timeout=5)
        summary, out, rej = run(client, recs, tmp_path, count, max_tries=2, base_delay=0.01)
    assert [r["id"] for r in rej] == ["r1"] and rej[0]["reason"] == "unfaithful"
    assert rej[0]["tries"] == 2 and summary.rejected == {"unfaithful": 1}
    assert len(out) == 3


def test_rerun_skips_done_ids(tmp_path, count, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with FakeLLM(count) as server:
        client = make_client(f"openai:m@{server.url}")
        run(client, records(5), tmp_path, count)
        first = server.requests
        client = make_client(f"openai:m@{server.url}")
        summary, out, _ = run(client, records(8), tmp_path, count)
        assert server.requests - first == 3
    assert summary.skipped_done == 5 and len(out) == 8


def test_length_check_and_fix(count):
    src = "Intro.\nItem: " + "word " * 40
    ann = 'Intro.\nItem:<promise topic="x" tokens="9"/><async> ' + "word " * 40 + "</async><sync/>"
    ann = ann.replace("word </async>", "word</async>") + ""
    src = src.rstrip()
    with pytest.raises(Rejection, match="length_mismatch"):
        check_annotation(ann, src, count, LLMAnnotateConfig())
    fixed = check_annotation(ann, src, count, LLMAnnotateConfig(fix_lengths=True))
    assert 'tokens="4"/>' in fixed


def test_token_bucket_limits_rate(monkeypatch):
    """10 a second with a burst of 1: the k-th acquisition comes at k / 10 s of the bucket's
    clock (a fake clock that the bucket's sleeps advance, so a busy machine cannot stretch it)."""
    import types

    from solm.core.llm import jobs

    clock = [100.0]

    async def sleep(seconds):
        clock[0] += seconds

    monkeypatch.setattr(jobs, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(jobs, "asyncio", types.SimpleNamespace(Lock=asyncio.Lock, sleep=sleep))

    async def go():
        bucket = TokenBucket(rate_per_minute=600, burst=1)
        times = []
        for _ in range(6):
            await bucket.acquire()
            times.append(clock[0] - 100.0)
        clock[0] += 0.35  # idle: one token comes back, never more than the burst
        await bucket.acquire()
        start = clock[0]
        await bucket.acquire()
        return times, clock[0] - start

    times, after_idle = asyncio.run(go())
    assert times == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    assert after_idle == pytest.approx(0.1)


def test_redaction():
    from solm.core.llm.base import register_secret
    register_secret(SECRET)
    assert SECRET not in redact(f"failed with key {SECRET} at url?key=abc")
    assert "abc" not in redact("GET /v1/x?key=abc")


@pytest.mark.slow
def test_killed_run_resumes_with_every_id_exactly_once(tmp_path, count):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, "prompt": r.prompt, "response": r.response})
                            + "\n" for r in records(60)))
    out = tmp_path / "out.jsonl"
    env = dict(os.environ, OPENAI_API_KEY=SECRET, HF_HUB_OFFLINE="1")
    with FakeLLM(count, delay_s=0.15, fault_rate=0.1, faults=("500", "429"), seed=3) as server:
        cmd = [sys.executable, "-m", "solm.cli.pasta", "annotate", "-i", str(data), "-o", str(out),
               "--annotator", f"openai:m@{server.url}", "--concurrency", "4", "-q"]
        proc = subprocess.Popen(cmd, env=env)
        # no tight deadline: on a busy machine the child's imports alone can take minutes
        deadline = time.time() + 900
        while proc.poll() is None and time.time() < deadline and (
                not out.exists() or len(out.read_text().splitlines()) < 15):
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        partial = len(out.read_text().splitlines())
        assert 15 <= partial < 60
        subprocess.run(cmd, env=env, check=True, timeout=300)
    rej = tmp_path / "out.rejects.jsonl"
    ids = [r["id"] for r in read_jsonl(out)] + ([r["id"] for r in read_jsonl(rej)]
                                                 if rej.exists() else [])
    assert sorted(ids) == sorted(r.id for r in records(60))
    manifest = (tmp_path / "out.jsonl.manifest.json").read_text()
    assert SECRET not in manifest and "prompt_version" in manifest


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["gemini", "openai"])
def test_acceptance_1000_instruct_rows_at_concurrency_32(backend, tmp_path, count, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    recs = sample_records(1000)  # dolly and OpenOrca responses (tests/data), cycled
    with FakeLLM(count, fault_rate=0.10, seed=7, slow_s=12.0) as server:
        client = make_client(f"{backend}:gemini-1.5-flash@{server.url}", timeout=6.0)
        t = time.perf_counter()
        summary, out, rej = run(client, recs, tmp_path, count, concurrency=32, max_tries=6,
                                base_delay=0.1, max_delay=1.0)
        elapsed = time.perf_counter() - t
    ids = [r["id"] for r in out] + [r["id"] for r in rej]
    assert len(ids) == len(set(ids)) == 1000  # 0 lost, 0 duplicated
    assert all(faithful(r["annotated"], r["response"]) for r in out if r["annotated"])
    assert 60 <= sum(server.fault_counts.values()) <= 200  # ~10% of ~1,100 requests faulted
    print(f"\n{backend}: {elapsed:.1f}s, accepted {len(out)}, rejected "
          f"{summary.rejected}, retries {summary.retries}, faults {server.fault_counts}")


def test_hf_backend_runs_end_to_end_and_rejects_what_it_cannot_annotate(tmp_path, count,
                                                                        pasta_tokenizer):
    """A tiny random local model writes garbage: every row must end up rejected, none lost."""
    from solm.core.models import tiny_model
    model, tok = tiny_model(pasta_tokenizer)
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    client = make_client(f"hf:{tmp_path / 'tiny'}", batch_size=4)
    summary, out, rej = run(client, records(3), tmp_path, count, concurrency=4, max_tries=2,
                            max_output_tokens=16, base_delay=0.01)
    assert len(out) + len(rej) == 3 and not out
    assert {r["reason"] for r in rej} <= {"unparsable_reply", "unfaithful", "invalid"}
    assert summary.requests == 6


@pytest.mark.slow
def test_hf_backend_with_the_embedded_model(tmp_path, count):
    client = make_client("hf:smollm2-135m", batch_size=2)
    summary, out, rej = run(client, records(2), tmp_path, count, concurrency=2, max_tries=1,
                            max_output_tokens=64)
    assert len(out) + len(rej) == 2
    for r in out:  # whatever it wrote, only faithful annotations may pass
        assert r["annotated"] is None or faithful(r["annotated"], r["response"])


def test_rows_rejected_while_the_server_was_down_are_retried_on_rerun(tmp_path, count):
    """Transport failures are the service's, not the row's: a rerun tries them again, while
    rows rejected for their content stay rejected."""
    recs = records(4)
    with FakeLLM(count) as server:
        url = server.url
    # the server is down now: every row fails on transport after its tries
    down = make_client(f"openai:m@{url}", timeout=1)
    summary, accepted, rejected = run(down, recs, tmp_path, count, max_tries=1)
    assert not accepted and len(rejected) == 4
    assert all(r["transient"] for r in rejected)
    with open(tmp_path / "rej.jsonl", "a") as f:  # a content reject must stay settled
        f.write(json.dumps({"id": "r3", "reason": "unfaithful", "transient": False}) + "\n")
    with FakeLLM(count) as server:
        up = make_client(f"openai:m@{server.url}", timeout=5)
        summary, accepted, _ = run(up, recs, tmp_path, count)
    assert summary.retried_rejects == 3
    assert sorted(r["id"] for r in accepted) == ["r0", "r1", "r2"]
    assert summary.skipped_done == 1
