"""Every decode path's outputs on fixed prompts, without timings: the record a restructuring
must leave unchanged.

    python tests/golden_outputs.py record            # the tiny-model cases
    python tests/golden_outputs.py record --kept     # and the kept models' (minutes)
    pytest tests/test_golden_outputs.py              # compare

Each case runs a real command through its typer app, in process, on a tiny random Llama
built from fixed seeds (fp32, no compile; the commands add each system's control tokens as
they load it) or on a kept model. A row keeps what a decode decided (tokens, text, flags,
counts, forward passes, sampled log-probs rounded to 4 decimals) and drops every timing and
machine field. Kept-model cases are stored beside the sha256 of the model's files: a
retrained kept model is re-recorded, not failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "outputs.json"
GOLDEN_KEPT = HERE / "golden" / "outputs_kept.json"

# the last is the demo's, which the kept Pasta-SFT model answers with four threads
PROMPTS = ["Name three fruits.", "How do I boil an egg?", "Write a haiku about rain.",
           "What are the pros and cons of working from home?"]
PROBLEMS = ["What is 12 + 30?", "A square has side 5. What is its area?"]
# keys whose values are timings or describe the machine, not what was decoded
_DROPPED = re.compile(r"(^|_)(s|ms|sec|seconds|time|times|wall|elapsed|throughput|tok|"
                      r"machine|cpu|date|started|finished|host|pid)($|_)|realized|per_s$|"
                      r"_at$")


@dataclass
class Case:
    name: str
    app: str  # pasta | tip | pdiff
    args: Callable[[Path, str], list[str]]  # (workdir, model) -> argv
    outputs: Callable[[Path], list[Path]]  # workdir -> the JSONL files it wrote
    model: str = "tiny"  # or a kept model's name


def _common(extra: list[str]) -> list[str]:
    # recorded on the reference engine (the default, auto, picks whatever is fastest here)
    return [*extra, "--dtype", "fp32", "--engine", "torch", "-q"]


def _prompts_file(work: Path) -> Path:
    path = work / "prompts.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n"
                                for i, p in enumerate(PROMPTS)))
    return path


def _problems_file(work: Path) -> Path:
    path = work / "problems.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps({"id": f"q{i}", "problem": p, "answer": "0"}) + "\n"
                                for i, p in enumerate(PROBLEMS)))
    return path


def _pasta_decode(mode: str, batch: int, tokens: int = 12, temperature: str = "1.0"):
    def args(work: Path, model: str) -> list[str]:
        return _common(["decode", "-p", str(_prompts_file(work)), "-o",
                        str(work / "out.jsonl"), "-m", model, "--mode", mode,
                        "--max-new-tokens", str(tokens), "--temperature", temperature,
                        "--seed", "7", "--batch-size", str(batch), "--no-compile"])
    return args


def _tip_decode(policy: str):
    def args(work: Path, model: str) -> list[str]:
        return _common(["decode", "-m", model, "-p", str(_problems_file(work)), "-o",
                        str(work / "out.jsonl"), "--registers", "4", "--policy", policy,
                        "--budget", "24", "--page-size", "8", "--num-pages", "64",
                        "--max-new-tokens", "20", "--temperature", "1.0", "--seed", "1",
                        "--samples", "2", "--no-compile"])
    return args


def _pdiff_decode(tokens: int = 24, temperature: str = "1.0"):
    def args(work: Path, model: str) -> list[str]:
        return _common(["decode", "-m", model, "-p", str(_prompts_file(work)), "-o",
                        str(work / "out.jsonl"), "--max-new-tokens", str(tokens),
                        "--temperature", temperature, "--seed", "2",
                        # the recorded steps ratio (the default's before it became 0.5)
                        "--steps-ratio", "1"])
    return args


def _eval_run(work: Path, model: str) -> list[str]:
    return _common(["eval", "run", "-o", str(work / "run"), "--prompts",
                    str(_prompts_file(work)), "--method", f"sequential={model}",
                    "--method", f"sot={model}", "--method", f"apar:ap={model}",
                    "--method", f"pdiff={model}", "--no-judge", "--max-new-tokens", "10",
                    "--sot-skeleton-tokens", "12", "--sot-point-tokens", "4",
                    "--temperature", "1.0", "--seed", "3", "--no-compile"])


def _prefs(work: Path, model: str) -> list[str]:
    return ["prefs", "-p", str(_prompts_file(work)), "-o", str(work / "prefs"), "-m", model,
            "--baseline-model", model, "--samples", "3", "--quality-weight", "0",
            "--max-new-tokens", "10", "--temperature", "1.0", "--seed", "5", "--dtype",
            "fp32", "-q"]


def _file(name: str) -> Callable[[Path], list[Path]]:
    return lambda work: [work / name]


def _folder(name: str) -> Callable[[Path], list[Path]]:
    return lambda work: sorted((work / name).rglob("*.jsonl"))


CASES: list[Case] = [
    Case("pasta_decode_sequential", "pasta", _pasta_decode("sequential", 1), _file("out.jsonl")),
    Case("pasta_decode_parallel", "pasta", _pasta_decode("parallel", 1), _file("out.jsonl")),
    Case("pasta_decode_parallel_batched", "pasta", _pasta_decode("parallel", 3),
         _file("out.jsonl")),
    Case("pasta_eval_run", "pasta", _eval_run, _folder("run/outputs")),
    Case("pasta_prefs", "pasta", _prefs, _folder("prefs")),
    *[Case(f"tip_decode_{p}", "tip", _tip_decode(p), _file("out.jsonl"))
      for p in ("tip", "dense", "streamingllm", "h2o")],
    Case("pdiff_decode", "pdiff", _pdiff_decode(), _file("out.jsonl")),
]
KEPT_CASES: list[Case] = [
    Case("kept_pasta_decode_parallel", "pasta", _pasta_decode("parallel", 2, 64, "0"),
         _file("out.jsonl"), model="pasta-sft-cpu"),
    Case("kept_pasta_decode_sequential", "pasta", _pasta_decode("sequential", 2, 48, "0"),
         _file("out.jsonl"), model="baseline-sft-cpu"),
    Case("kept_pdiff_decode", "pdiff", _pdiff_decode(64, "0"), _file("out.jsonl"),
         model="pdiff-cpu"),
]


def normalise(value, paths: dict[str, str] | None = None):
    """A row without its timings, floats rounded (4 decimals), the run's own folders named
    by placeholders (`paths`: folder -> placeholder)."""
    paths = paths or {}
    if isinstance(value, dict):
        return {k: normalise(v, paths) for k, v in sorted(value.items())
                if not _DROPPED.search(k)}
    if isinstance(value, list):
        return [normalise(v, paths) for v in value]
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, str):
        for folder, name in paths.items():
            value = value.replace(folder, name)
    return value


def _rows(path: Path, work: Path, paths: dict[str, str]) -> dict:
    rows = [normalise(json.loads(line), paths) for line in path.read_text().splitlines() if line]
    return {"file": str(path.relative_to(work)), "rows": rows}


def tiny_model_folder(root: Path) -> str:
    """The tiny random Llama every tiny case decodes with (seed 1), saved like a checkpoint."""
    folder = root / "tiny"
    if not (folder / "config.json").exists():
        from solm.core.models import load_tokenizer, tiny_model

        tok = load_tokenizer("smollm2-135m")
        model, _ = tiny_model(tok, seed=1)
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
    return str(folder)


def kept_model_digest(name: str) -> str:
    """sha256 over a kept model's files (names and bytes), so a retrain re-records."""
    from solm.core.models import artifact_folder

    folder = Path(artifact_folder(name))
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def run_case(case: Case, work: Path, tiny: str | None = None) -> list[dict]:
    """Run the case's command in `work`; its output rows, normalised."""
    from typer.testing import CliRunner

    from solm.cli import pasta, pdiff, tip

    app = {"pasta": pasta.app, "tip": tip.app, "pdiff": pdiff.app}[case.app]
    model = tiny if case.model == "tiny" else case.model
    work.mkdir(parents=True, exist_ok=True)
    result = CliRunner().invoke(app, case.args(work, model), catch_exceptions=False)
    if result.exit_code != 0:
        raise RuntimeError(f"{case.name}: exit {result.exit_code}\n{result.output[-3000:]}")
    files = case.outputs(work)
    if not files:
        raise RuntimeError(f"{case.name}: wrote no JSONL output")
    paths = {str(work): "<work>", **({tiny: "<tiny>"} if tiny else {})}
    return [_rows(p, work, paths) for p in files]


# requests each server answers (greedy, seeded sampling, PASTA's sequential mode)
SERVE_REQUESTS = {
    "pasta": [("chat", {"messages": [{"role": "user", "content": PROMPTS[0]}]}),
              ("chat", {"messages": [{"role": "user", "content": PROMPTS[1]}],
                        "temperature": 1.0, "seed": 5}),
              ("completions", {"prompt": PROMPTS[2], "mode": "sequential", "max_tokens": 6}),
              ("chat", {"messages": [{"role": "user", "content": PROMPTS[3]}],
                        "temperature": 1.0, "top_p": 0.8, "seed": 9,
                        "repetition_penalty": 1.3})],
    "tip": [("chat", {"messages": [{"role": "user", "content": PROBLEMS[0]}]}),
            ("completions", {"prompt": PROBLEMS[1], "seed": 4, "max_tokens": 8})],
}


def serve_outputs(tiny: str) -> dict[str, list]:
    """Each server's answers to SERVE_REQUESTS (tiny model, in process, one request at a
    time): text, finish reason, usage and solm's figures, without timings."""
    from fastapi.testclient import TestClient

    from solm.core.models import load_decoder
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime
    from solm.decode.tip.runtime import TipDecodeConfig, TipRuntime
    from solm.serve.app import ServeSettings, create_app
    from solm.serve.engine import ServeEngine
    from solm.serve.tip_engine import TipServeEngine

    out = {}
    for system in ("pasta", "tip"):
        if system == "pasta":
            m, tok = load_decoder(tiny, dtype="fp32")
            engine = ServeEngine(PastaRuntime(m, tok, pool_size=256), max_queue=8, max_batch=2)
            defaults = PastaDecodeConfig(max_new_tokens=12, sampling=SamplingConfig(seed=3))
        else:
            m, tok = load_decoder(tiny, dtype="fp32", system="tip", num_registers=4)
            defaults = TipDecodeConfig(policy="tip", batch_size=2, max_new_tokens=12,
                                       sampling=SamplingConfig(temperature=1.0, top_p=0.9,
                                                               seed=2))
            engine = TipServeEngine(TipRuntime(m, tok, num_pages=64, page_size=8,
                                               num_registers=4), defaults, max_queue=8,
                                    max_batch=2)
        engine.start_in_thread()
        answers = []
        with TestClient(create_app(engine, ServeSettings("golden", defaults))) as client:
            for route, body in SERVE_REQUESTS[system]:
                r = client.post(f"/v1/{'chat/completions' if route == 'chat' else route}",
                                json={"model": "golden", **body})
                data = r.json()
                choice = data["choices"][0]
                answers.append(normalise({
                    "status": r.status_code, "finish_reason": choice["finish_reason"],
                    "text": choice["message"]["content"] if route == "chat" else choice["text"],
                    "usage": data["usage"], "solm": data.get("solm", {})},
                    {tiny: "<tiny>"}))
        engine.shutdown(0)
        out[system] = answers
    return out


def record(kept: bool, work: Path) -> None:
    tiny = tiny_model_folder(work)
    out = {"machine": _machine(), "cases": {}}
    for case in CASES:
        print(f"recording {case.name}", flush=True)
        out["cases"][case.name] = run_case(case, work / case.name, tiny)
    print("recording serve answers", flush=True)
    out["serve"] = serve_outputs(tiny)
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    if kept:
        kept_out = {"machine": _machine(), "cases": {}}
        for case in KEPT_CASES:
            print(f"recording {case.name}", flush=True)
            kept_out["cases"][case.name] = {"model_sha256": kept_model_digest(case.model),
                                            "outputs": run_case(case, work / case.name)}
        GOLDEN_KEPT.write_text(json.dumps(kept_out, indent=1, sort_keys=True) + "\n")


def _machine() -> str:
    from solm.engines.bandwidth import cpu_description

    return cpu_description()


def main() -> int:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["record"])
    p.add_argument("--kept", action="store_true", help="also the kept models' cases")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        record(args.kept, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
