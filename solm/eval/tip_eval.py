"""`tip eval run` / `tip eval report`: maths accuracy against KV memory, throughput and decode
time, per eviction policy and budget, the thesis' protocol by default.

A run folder holds:
- `samples.jsonl`: one row per (data set, problem, policy, budget, sample), appended as each
  decode ends (a rerun skips the rows already there): prediction, gold, correct, generated
  tokens, live KV tokens (mean per decode step, and the response's share), peak, decode
  time, registers opened and steps killed;
- `timing.jsonl`: per (data set, policy, budget) segment of decoding, its tokens and wall
  time (throughput = tokens / wall, summed over segments, so a resumed run counts right);
- `run.json`: the settings.

Metrics per (data set, policy, budget): accuracy = the mean over problems of the fraction of
its samples that are correct; live KV = the mean over samples of the tokens attention read per
decode step (prompt included) and of the response tokens among them; throughput = generated
tokens / wall time of the batched decode; decode time = the mean per sample.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from solm.core.errors import SolmError
from solm.core.systems.tip import steps_and_kills
from solm.decode.jobs import DecodeSummary

DATA_SETS = ("aime2024", "aime2025", "math500", "gsm8k_test")
# the thesis' protocol (samples, sampling, batch, page); the cap is a flag: long enough for
# reasoning traces of distilled models
PROTOCOL = {"samples": 16, "temperature": 0.6, "top_p": 0.95, "batch_size": 16,
            "page_size": 64, "budgets": (1024, 2048, 4096), "max_new_tokens": 32768}


@dataclass(frozen=True)
class Point:
    policy: str
    budget: int | None

    @property
    def label(self) -> str:
        return self.policy if self.budget is None else f"{self.policy}@{self.budget}"


def eval_points(policies: Iterable[str], budgets: Iterable[int],
                page_size: int | None = None) -> list[Point]:
    """Every policy; the budgeted ones once per budget, the others (dense, tip) once. Errors
    name this command's options (--policies, --budgets, --page-size)."""
    from solm.decode.tip.policies import POLICIES

    out = []
    budgets = list(budgets)
    repeated = sorted({b for b in budgets if budgets.count(b) > 1})
    if repeated:
        raise SolmError(f"--budgets lists {', '.join(map(str, repeated))} more than once")
    policies = list(policies)
    twice = sorted({p for p in policies if policies.count(p) > 1})
    if twice:
        raise SolmError(f"--policies lists {', '.join(twice)} more than once")
    for name in policies:
        if name not in POLICIES:
            raise SolmError(f"--policies: unknown policy '{name}' (have "
                            f"{', '.join(POLICIES)})")
        if POLICIES[name].needs_budget:
            if not budgets:
                raise SolmError(f"--policies {name} needs --budgets")
            small = [b for b in budgets if page_size is not None and b < 2 * page_size]
            if small:
                raise SolmError(f"--budgets {small[0]}: {name} needs a budget of at least two "
                                f"pages (2 x --page-size {page_size} = {2 * page_size} "
                                f"tokens)")
            out += [Point(name, b) for b in budgets]
        else:
            out.append(Point(name, None))
    return out


def data_file(name_or_path: str) -> tuple[str, Path]:
    """(name, path) of a data set: a JSONL path, or a set `solm data get` fetches."""
    path = Path(name_or_path)
    if path.suffix == ".jsonl" or path.exists():
        if not path.exists():
            raise SolmError(f"{path}: no such file")
        return path.stem, path
    from solm.data.get import data_root

    cached = data_root() / f"{name_or_path}.jsonl"
    if not cached.exists():
        raise SolmError(f"data set '{name_or_path}' is not in {data_root()}: run `solm data get "
                        f"{name_or_path}` (or pass a JSONL path)")
    return name_or_path, cached


def row_key(row: dict) -> tuple:
    return row["data"], row["id"], row["policy"], row["budget"], row["sample"]


def read_rows(path: Path) -> list[dict]:
    from solm.core.jsonl import read_jsonl

    return list(read_jsonl(path, skip_partial_last_line=True)) if path.exists() else []


def run_point(runtime, point: Point, data: str, problems: list[dict], samples: int,
              config_kw: dict, run_dir: Path, done: set,
              on_row: Callable[[dict], None] | None = None) -> int:
    """Decode every (problem, sample) of one point not yet in the run through the one decode
    loop (`solm.decode.jobs`); returns rows written. A timing segment is written even when
    the run is stopped midway, marked incomplete: throughput is read from complete
    segments only (a stopped one paid for rows in flight that no row counts)."""
    from solm.core.chat import check_prompt_fits, prompt_ids
    from solm.core.jsonl import JsonlWriter
    from solm.core.records import Record
    from solm.core.sampling import SamplingConfig
    from solm.decode.jobs import check_refusals, decode_jobs
    from solm.decode.protocol import Job
    from solm.decode.tip.decode_file import TipRunner
    from solm.decode.tip.runtime import TipDecodeConfig

    todo = [(p, k) for p in problems for k in range(samples)
            if (data, p["id"], point.policy, point.budget, k) not in done]
    if not todo:
        return 0
    tok = runtime.tokenizer
    prompts = {p["id"]: tuple(prompt_ids(tok, p["prompt"])) for p in problems}
    for p in problems:
        check_prompt_fits(tok, prompts[p["id"]], Record(p["id"], p["prompt"],
                                                        origin=p.get("origin")))
    by_id = {p["id"]: p for p in problems}
    jobs = [Job(i, Record(p["id"], p["prompt"]), prompts[p["id"]], k)
            for i, (p, k) in enumerate(todo)]
    cfg = TipDecodeConfig(policy=point.policy, budget=point.budget,
                          batch_size=config_kw["batch_size"],
                          max_new_tokens=config_kw["max_new_tokens"],
                          sampling=SamplingConfig(config_kw["temperature"], config_kw["top_p"],
                                                  config_kw["seed"]))

    def row(job: Job, res) -> dict:
        return sample_row(data, point, by_id[job.record.id], job, res, runtime)

    summary = _Tokens()
    started = time.perf_counter()
    complete = False
    with JsonlWriter(run_dir / "timing.jsonl") as timing:
        try:
            decode_jobs(TipRunner(runtime, cfg), jobs, run_dir / "samples.jsonl", row,
                        summary, (lambda _s, r: on_row(r)) if on_row else None)
            complete = True
        finally:
            # a stopped segment's wall time also paid for the rows still in flight, whose
            # tokens no row counts: it is kept, marked, and left out of the throughput
            timing.write({"data": data, "policy": point.policy, "budget": point.budget,
                          "tokens": summary.tokens, "rows": summary.done,
                          "wall_s": round(time.perf_counter() - started, 3),
                          "complete": complete})
    check_refusals(summary, str(run_dir / "samples.jsonl"))
    return summary.done


@dataclass
class _Tokens(DecodeSummary):
    """Rows written and tokens generated (a timing segment's figures)."""

    tokens: int = 0

    def add(self, row: dict, result, runner, seconds: float) -> None:
        self.tokens += result.generated


def sample_row(data: str, point: Point, problem: dict, job, res, runtime) -> dict:
    """One samples.jsonl row: the answer graded against the problem's gold, KV figures."""
    from solm.core.math_task import is_correct, predicted_answer

    text = runtime.tokenizer.decode(res.ids, skip_special_tokens=True)
    prediction = predicted_answer(text)
    opened, killed = steps_and_kills(res.ids, runtime.vocab)
    return {"data": data, "id": problem["id"], "policy": point.policy,
            "budget": point.budget, "sample": job.sample, "prediction": prediction,
            "gold": problem["gold"],
            "correct": is_correct(prediction, problem["gold"], problem["kind"]),
            "generated": res.generated, "prompt_tokens": len(job.prompt_ids),
            "mean_live_tokens": round(res.mean_live_tokens, 2),
            "live_response_tokens": round(res.mean_live_response_tokens, 2),
            "peak_live_tokens": res.peak_live_tokens, "peak_pages": res.peak_pages,
            "decode_s": round(res.decode_s, 3), "prefill_s": round(res.prefill_s, 3),
            "registers_opened": opened, "steps_killed": killed, "flags": res.flags,
            "response": text}


def summarise(rows: list[dict], timing: list[dict]) -> list[dict]:
    """One summary per (data set, policy, budget)."""
    from solm.core.stats import wilson_interval

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["data"], r["policy"], r["budget"]), []).append(r)
    out = []
    for (data, policy, budget), rs in sorted(groups.items(), key=lambda kv: (
            kv[0][0], kv[0][1], kv[0][2] or 0)):
        by_problem: dict[str, list[bool]] = {}
        for r in rs:
            by_problem.setdefault(r["id"], []).append(bool(r["correct"]))
        solved = sum(sum(v) / len(v) for v in by_problem.values())
        accuracy = solved / len(by_problem)
        # 95% interval: Wilson's over problems (exact for one sample a problem; with more,
        # each problem counts its fraction solved)
        low, high = wilson_interval(solved, len(by_problem))
        segs = [t for t in timing if (t["data"], t["policy"], t["budget"]) ==
                (data, policy, budget) and t.get("complete", True)]
        tokens, wall = sum(t["tokens"] for t in segs), sum(t["wall_s"] for t in segs)
        n = len(rs)
        long_rows = [r for r in rs if r["generated"] >= 256]
        steps = sum(r["registers_opened"] for r in rs)
        out.append({
            "data": data, "policy": policy, "budget": budget,
            "label": policy if budget is None else f"{policy}@{budget}",
            "problems": len(by_problem), "samples": n, "accuracy": round(accuracy, 4),
            "accuracy_ci95": [round(low, 4), round(high, 4)],
            "peak_live_tokens": (round(sum(peaks) / len(peaks), 1) if (peaks := [
                r["peak_live_tokens"] for r in rs if "peak_live_tokens" in r]) else None),
            "peak_pages": max((r["peak_pages"] for r in rs if "peak_pages" in r), default=None),
            "mean_live_tokens": round(sum(r["mean_live_tokens"] for r in rs) / n, 1),
            "live_response_tokens": round(sum(r["live_response_tokens"] for r in rs) / n, 1),
            "live_response_tokens_256plus": (round(sum(r["live_response_tokens"]
                                                       for r in long_rows) / len(long_rows), 1)
                                             if long_rows else None),
            "decodes_256plus": len(long_rows),
            "generated_tokens": round(sum(r["generated"] for r in rs) / n, 1),
            "throughput_tok_s": round(tokens / wall, 2) if wall else None,
            "decode_s": round(sum(r["decode_s"] for r in rs) / n, 2),
            "steps_opened": steps,
            "share_steps_killed": round(sum(r["steps_killed"] for r in rs) / steps, 4)
            if steps else 0.0,
            "capped": sum("max_new_tokens" in r["flags"] for r in rs),
        })
    return out


def pages_for(prompts: list[int], max_new_tokens: int, page_size: int, batch_size: int) -> int:
    """Pages for `batch_size` requests of the longest prompt + the cap (TIP's fresh page per
    step can leave one partly empty page per live step: a margin of registers + 2 pages)."""
    longest = max(prompts) + max_new_tokens + 1
    return batch_size * (-(-longest // page_size) + 18)


def point_engine(point: Point, page_size: int, engine: str) -> str:
    """The engine a policy point decodes on under `--engine` (`auto`: torch where llama.cpp
    cannot: h2o, a one-page streamingllm window)."""
    from solm.decode.tip.policies import make_policy
    from solm.engines import choose

    return choose(engine, "tip", policy=make_policy(point.policy, point.budget, page_size))


def run_tip_eval(run_dir: Path, data_specs: list[str], points: list[Point], model: str,
                 dense_model: str | None, registers: int, protocol: dict, limit: int | None,
                 dtype: str = "auto", device: str | None = None,
                 on_row: Callable[[dict], None] | None = None,
                 on_point: Callable[[str, Point, int], None] | None = None,
                 shard=None, engines: dict[str, str] | None = None,
                 gguf_type: str = "q8_0") -> list[dict]:
    """Decode everything not yet in `run_dir` (with `shard`, a `solm.core.shard.Shard`, only
    its problems of each data set); returns the summaries. `engines`: each policy's engine
    (`point_engine`; default torch)."""
    from solm.core.shard import take

    from solm.core.chat import prompt_ids
    from solm.decode.tip.runtime import TipRuntime
    from solm.decode.tip.system import TipEngine
    from solm.core.math_task import load_problems, math_prompt
    from solm.core.models import model_system
    from solm.engines import get_engine, load_on_engine

    run_dir.mkdir(parents=True, exist_ok=True)
    sets = [data_file(spec) for spec in data_specs]
    # the problems as written: a trained model's tokenizer adds the instruction it was
    # trained with (`solm.core.prompt_format`); a model trained for nothing gets the maths one
    problems = {name: take(load_problems(str(path), math_prompt=False, limit=limit), shard)
                for name, path in sets}
    done = {row_key(r) for r in read_rows(run_dir / "samples.jsonl")}
    loaded: dict[str, tuple] = {}
    for point in points:
        name = model if point.policy == "tip" else (dense_model or model)
        for data, rows in problems.items():
            todo = sum(1 for p in rows for k in range(protocol["samples"])
                       if (data, p["id"], point.policy, point.budget, k) not in done)
            if on_point:
                on_point(data, point, todo)
            if not todo:
                continue
            engine = (engines or {}).get(point.label, "torch")
            key = (name, engine)
            if key not in loaded:
                loaded.clear()  # one model in memory at a time
                settings = TipEngine(engine=engine, gguf_type=gguf_type, registers=registers)
                loaded[key] = (load_on_engine(name, settings, dtype, device, "tip",
                                              registers), settings)
            (m, tok), settings = loaded[key]
            if model_system(name) is None:
                rows = [{**p, "prompt": math_prompt(p["prompt"])} for p in rows]
            lengths = [len(prompt_ids(tok, p["prompt"])) for p in rows]
            longest = max(lengths) + protocol["max_new_tokens"] + 1
            kv = get_engine(engine).step("paged", settings, protocol["batch_size"] * longest,
                                         protocol["batch_size"], independent=True)
            rt = TipRuntime(m, tok, num_pages=pages_for(lengths, protocol["max_new_tokens"],
                                                        protocol["page_size"],
                                                        protocol["batch_size"]),
                            page_size=protocol["page_size"], num_registers=registers, kv=kv)
            run_point(rt, point, data, rows, protocol["samples"], protocol, run_dir, done,
                      on_row)
    return summarise(read_rows(run_dir / "samples.jsonl"), read_rows(run_dir / "timing.jsonl"))


def pending(run_dir: Path, data_specs: list[str], points: list[Point], samples: int,
            limit: int | None, shard=None) -> int:
    """Samples a run still has to decode (for the progress bar)."""
    from solm.core.shard import take
    from solm.core.math_task import load_problems

    done = {row_key(r) for r in read_rows(run_dir / "samples.jsonl")}
    total = 0
    for spec in data_specs:
        name, path = data_file(spec)
        for p in take(load_problems(str(path), math_prompt=False, limit=limit), shard):
            total += sum((name, p["id"], pt.policy, pt.budget, k) not in done
                         for pt in points for k in range(samples))
    return total
