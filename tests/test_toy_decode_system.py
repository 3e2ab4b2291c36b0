"""Adding a decode system is one config, one runtime speaking the protocol and one registry
entry: a toy system registered here, in a test file, gets a working decode
command (a file, a rerun, one prompt, a shard), a `pasta eval run` method and a
`solm serve --system`, from the registry alone.

The toy's rule, written once in its runtime and once as the oracle below: its answer is the
last `max_new_tokens` prompt ids, reversed (shifted by `shift`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import pytest
import typer
from typer.testing import CliRunner

from solm.core.chat import prompt_ids
from solm.core.sampling import SamplingConfig
from solm.core.settings import setting
from solm.decode.jobs import DecodeSummary
from solm.decode.protocol import Done, Job
from solm.core.control_tokens import pasta_tokens
from solm.core.systems import SYSTEMS, System, register
from solm.decode.registry import DecodeSystem, EngineSettings, EvalKinds, register_system

runner = CliRunner()


@dataclass
class ToyConfig:
    max_new_tokens: int = setting(4, "Answer tokens.", min=1)
    shift: int = setting(0, "Added to every answer id.", min=0, max=10)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)


@dataclass
class ToyEngine(EngineSettings):
    batch_size: int = setting(2, "Prompts per run.", min=1)


class ToyRunner:
    def __init__(self, tokenizer, config: ToyConfig):
        self.tokenizer, self.config = tokenizer, config

    def run(self, jobs: Iterable[Job]) -> Iterator[Done]:
        for job in jobs:
            tail = list(job.prompt_ids)[-self.config.max_new_tokens:]
            yield Done(job.rid, [t + self.config.shift for t in reversed(tail)])

    def row(self, job: Job, ids: list[int]) -> dict:
        return {"id": job.record.id, "prompt": job.record.prompt,
                "response": self.tokenizer.decode(ids), "ids": ids,
                "total_tokens": len(ids), "flags": []}


def oracle(tokenizer, text: str, n: int = 4, shift: int = 0) -> str:
    ids = prompt_ids(tokenizer, text)
    return tokenizer.decode([t + shift for t in ids[::-1][:n]])


@pytest.fixture()
def toy(pasta_tokenizer):
    def load(model, engine, dtype, device):
        return None, pasta_tokenizer

    def make_runner(model, tokenizer, config, engine, prompts, single):
        return ToyRunner(tokenizer, config)

    register(System("toy", "A toy.", lambda n: pasta_tokens(), None, tokens="pasta"))
    system = register_system(DecodeSystem(
        name="toy", help="A toy.", config_cls=ToyConfig, engine_cls=ToyEngine, load=load,
        runner=make_runner, summary_cls=DecodeSummary, sampling=("seed",),
        default_out="runs/toy.jsonl", evaluation=EvalKinds(methods={"toy": {}},
        eval_row=lambda row: {"output": row["response"], "content_tokens": row["total_tokens"],
                              "generated_tokens": row["total_tokens"],
                              "critical_path": row["total_tokens"],
                              "forward_passes": row["total_tokens"], "wall_s": 0.0,
                              "prefill_s": 0.0, "decode_s": 0.0, "flags": []})))
    yield system
    SYSTEMS.pop("toy")


def _prompts(tmp_path, n=3):
    path = tmp_path / "p.jsonl"
    texts = [f"Tell me about the number {i} please." for i in range(n)]
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": t}) + "\n"
                            for i, t in enumerate(texts)))
    return path, texts


def test_a_registered_system_gets_a_decode_command(toy, tmp_path, pasta_tokenizer):
    from solm.cli.decode_command import decode_command

    app = typer.Typer()
    decode_command(app, "toy", "Decode with the toy.")
    app.command("other")(lambda: None)  # a group, as the real apps are
    path, texts = _prompts(tmp_path)
    out = tmp_path / "o.jsonl"
    args = ["decode", "-p", str(path), "-o", str(out), "--shift", "2", "-q"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["response"] for x in rows] == [oracle(pasta_tokenizer, t, shift=2) for t in texts]
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and json.loads(r.stdout)["skipped"] == 3
    r = runner.invoke(app, ["decode", "-p", str(path), "-o", str(out), "--shift", "3", "-q"])
    assert r.exit_code != 0 and "shift=2" in r.output  # other settings: refused
    r = runner.invoke(app, ["decode", texts[0], "--max-new-tokens", "2", "-q"])
    assert r.exit_code == 0 and r.stdout == oracle(pasta_tokenizer, texts[0], n=2) + "\n"
    part = tmp_path / "s.jsonl"
    r = runner.invoke(app, ["decode", "-p", str(path), "-o", str(part), "--shard", "1/2", "-q"])
    assert r.exit_code == 0, r.output
    shard_rows = part.with_name("s.shard-1-of-2.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in shard_rows] == ["p1"]
    r = runner.invoke(app, ["decode", "--shift", "11", "-p", str(path), "-o", str(out)])
    assert r.exit_code == 2  # the config's bounds are the option's


def test_a_registered_system_is_an_eval_method(toy, tmp_path, pasta_tokenizer):
    from solm.cli.main import app

    path, texts = _prompts(tmp_path)
    out = tmp_path / "run"
    r = runner.invoke(app, ["pasta", "eval", "run", "-p", str(path), "-o", str(out),
                            "--method", "toy:t2=anything,shift=1", "--no-judge",
                            "--max-new-tokens", "4", "-q"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "outputs" / "t2.jsonl").read_text().splitlines()]
    assert [x["output"] for x in rows] == [oracle(pasta_tokenizer, t, shift=1) for t in texts]
    assert {x["kind"] for x in rows} == {"toy"}
    r = runner.invoke(app, ["pasta", "eval", "run", "-p", str(path), "-o", str(tmp_path / "b"),
                            "--method", "toy=m,shift=99", "--no-judge", "-q"])
    assert r.exit_code != 0 and "shift must be in [0, 10]" in r.output


def test_a_registered_system_is_served(toy, pasta_tokenizer):
    from fastapi.testclient import TestClient

    from solm.core.generation import resolve_decode
    from solm.serve.app import ServeSettings, create_app
    from solm.serve.systems import make_engine

    opts = dict(mode=None, max_new_tokens=4, penalize=None, seed=0, pool_size=512,
                max_fork_tokens=None, max_queue=4, max_batch=2, compile=None, quantize=None,
                policy=None, budget=None, registers=None, page_size=None)
    engine, defaults, _ = make_engine(toy, "anything", opts, resolve_decode("anything", {}),
                                      "fp32", None)
    engine.start_in_thread()
    app = create_app(engine, ServeSettings("toy-model", defaults))
    with TestClient(app) as client:
        r = client.post("/v1/chat/completions", json={
            "model": "toy-model", "max_tokens": 3,
            "messages": [{"role": "user", "content": "Count to three."}]})
        assert r.status_code == 200, r.text
        text = r.json()["choices"][0]["message"]["content"]
        assert text == oracle(pasta_tokenizer, "Count to three.", n=3)
        r = client.post("/v1/chat/completions", json={
            "model": "toy-model", "mode": "parallel",
            "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "mode"
    engine.shutdown(0)


def test_a_setting_an_older_output_does_not_name_must_keep_its_default(toy, tmp_path):
    """An output written before a setting existed was decoded at that setting's default: a
    rerun with another value is refused (a rerun compared only the settings both sides
    named), one at the default resumes."""
    from solm.cli.decode_command import decode_command
    from solm.core.provenance import manifest_path

    app = typer.Typer()
    decode_command(app, "toy", "Decode with the toy.")
    app.command("other")(lambda: None)
    path, _ = _prompts(tmp_path)
    out = tmp_path / "o.jsonl"
    assert runner.invoke(app, ["decode", "-p", str(path), "-o", str(out), "-q",
                               "--limit", "1"]).exit_code == 0
    manifest = json.loads(manifest_path(out).read_text())
    del manifest["row_settings"]["shift"]  # as a manifest written before `shift` existed
    manifest_path(out).write_text(json.dumps(manifest))
    r = runner.invoke(app, ["decode", "-p", str(path), "-o", str(out), "--shift", "2", "-q"])
    assert r.exit_code != 0 and "shift=0 (now 2)" in r.output
    r = runner.invoke(app, ["decode", "-p", str(path), "-o", str(out), "-q"])
    assert r.exit_code == 0 and json.loads(r.stdout)["skipped"] == 1
