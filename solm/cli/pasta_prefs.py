"""`pasta prefs`: sample, score and pair answers for BoNBoN (the job is `solm.prefs.job`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer

from solm.decode.pasta.config import PastaDecodeConfig
from solm.cli.setting_options import setting_option
from solm.core.sampling import SamplingConfig
from solm.cli.checks import check_paths, judge_spec, one_of
from solm.cli.console import console, info, judge_progress, out_console, progress
from solm.cli.flags import engine_option, gguf_type_option
from solm.cli.flags import (model_command, out_option, model_option, ConfigOption,
                            DebugOption, DeviceOption, DtypeOption, QuietOption,
                            RepetitionPenaltyOption, SeedOption, ShardOption)
from solm.cli.job_helpers import (finish_shard, folder_output, settings_from, sharded,
                                  take_shard)
from solm.core.errors import SolmError

PREFS_HELP = """Sample N answers per prompt, score each by speed and quality, write best-vs-worst pairs.

For every prompt: N samples from the PASTA model (parallel mode, temperature 1 by default;
identical samples count once: n is the number of distinct ones), decoded in batches that
share each prompt's prefill. Each sample gets

- a theoretical speedup: the Baseline-SFT answer's tokens / the sample's critical path (the
  Baseline-SFT answer is decoded here with --baseline-model, or read from --baseline); the
  runtime's step count gives `realized_step_speedup` too (wall times of batched samples
  depend on their batch mates, so none is recorded);
- a quality: its soft win rate in [0, 1] against the Baseline-SFT answer and the dataset's own
  answer, each pair judged in both orders through the judge's verdict cache (a tie is 0.5);
- score = speedup + λ x quality (--quality-weight; `inf`: quality, ties broken by speedup;
  `0`: speed only, and no judge runs).

The chosen answer is the best well-formed sample, the rejected one the worst sample; a
malformed sample (invalid Pasta-Lang, or cut by the runtime) ranks below every well-formed
one, and so does, with --min-length-ratio R, a sample shorter than R x the Baseline-SFT
answer. Prompts with no eligible sample, or one distinct sample, give no pair (counted).

OUT (a folder) receives baseline.jsonl, samples.jsonl, judgments.jsonl, scored.jsonl,
pairs.jsonl (for `pasta bonbon --data`) and summary.json. Everything is appended as it
finishes: rerun the same command after a kill and it resumes (no sample decoded twice, no
comparison judged twice). A rerun with other scoring weights (λ, μ, ν, --score content
with --min-length-ratio...) decodes nothing: it rescores the samples OUT holds and rewrites
scored.jsonl, pairs.jsonl and summary.json (copy the folder first to keep both).

Examples:

- CPU, λ = 0: `pasta prefs -p dolly.jsonl --limit 40 -m pasta-sft-cpu -n 4 --quality-weight 0 -o runs/r1/prefs`
- With a judge: `pasta prefs -p dolly.jsonl -m pasta-sft-cpu -n 4 --quality-weight inf --judge hf:smollm2-135m --judge-agreement runs/agreement.json -o runs/r1/prefs-inf`
"""


def _quality_weight(value: str) -> float:
    from solm.prefs.score import parse_quality_weight

    try:
        return parse_quality_weight(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


RESULT_FILES = ("baseline.jsonl", "samples.jsonl", "judgments.jsonl", "judgments.rejects.jsonl",
                "scored.jsonl", "pairs.jsonl", "summary.json")
RestartOption = typer.Option(False, "--restart", help="OUT holds results made with another "
                             "model, judge, prompts file or sampling settings: move them into "
                             "OUT/previous-TIME/ and start again (without it such a rerun "
                             "is refused). Scoring settings (--quality-weight, --score, "
                             "--repeat-weight, --guard-weight, --min-length-ratio, --speed) "
                             "need no restart: a rerun rescores the samples OUT holds.")


@model_command
def prefs(
    prompts: Path = typer.Option(..., "--prompts", "-p", help="JSONL of prompts (with the "
                                 "dataset's answer in `response`/`output`, used as a quality "
                                 "reference when present)."),
    out: Path = out_option(..., help="Output folder (resumable)."),
    model: str = model_option("pasta-sft-cpu", help="The PASTA model sampled "
                              "(this round's starting checkpoint)."),
    baseline_model: str = typer.Option("baseline-sft-cpu", help="Baseline-SFT model whose "
                                       "greedy answers are the speed yardstick."),
    baseline: Optional[Path] = typer.Option(None, help="Baseline-SFT answers to read instead "
                                            "of decoding them: JSONL rows with `id` and "
                                            "`response` (or `output`), e.g. a `pasta decode "
                                            "--mode sequential` output."),
    samples: int = typer.Option(10, "--samples", "-n", min=2, help="Samples per prompt."),
    quality_weight: str = typer.Option("1", help="λ in speedup + λ x quality: a number >= 0 or "
                                       "`inf`."),
    min_length_ratio: float = typer.Option(0.0, min=0.0, max=1.0, help="A sample whose "
                                           "text is shorter than this x the Baseline-SFT "
                                           "answer cannot be chosen (it ranks with the "
                                           "malformed): the speedup grows as an answer "
                                           "shrinks, so speed alone otherwise teaches brevity. "
                                           "0: off (the thesis' scoring)."),
    speed: str = typer.Option("baseline", callback=one_of("baseline", "own"), help="baseline: "
                              "the Baseline-SFT answer's tokens / the sample's critical path "
                              "(the thesis'; a shorter answer scores faster); own: the sample's "
                              "own text tokens / its critical path (only parallel structure "
                              "raises it)."),
    score: str = typer.Option("thesis", callback=one_of("thesis", "content"), help="thesis: "
                              "speedup + λ x the judge's quality; content (no judge): passes "
                              "saved (1 - critical path / own content tokens) + λ x min(1, "
                              "content / the Baseline-SFT answer's) - μ x repeated word "
                              "3-grams (--repeat-weight) - ν x the share of blocks a guard "
                              "closed (--guard-weight)."),
    repeat_weight: float = typer.Option(1.0, min=0.0, help="μ of --score content: the weight "
                                        "of the share of repeated word 3-grams."),
    guard_weight: float = typer.Option(1.0, min=0.0, help="ν of --score content: the weight "
                                       "of the share of a sample's blocks a guard closed "
                                       "(past its promise + slack, or looping): samples "
                                       "that keep their promises are preferred."),
    temperature: float = setting_option(SamplingConfig, "temperature", 1.0,
                                        why="preference pairs need different samples"),
    top_p: float = setting_option(SamplingConfig, "top_p"),
    repetition_penalty: Optional[float] = RepetitionPenaltyOption,
    max_new_tokens: int = setting_option(PastaDecodeConfig, "max_new_tokens"),
    judge: str = typer.Option("hf:smollm2-135m", "--judge", "-j", callback=judge_spec,
                              help="Judge backend (gemini:, openai:, hf:), as for `pasta "
                              "judge`."),
    judge_agreement: Optional[Path] = typer.Option(None, help="`pasta eval agreement` output "
                                                   "for this judge: recorded in summary.json; "
                                                   "a warning when chance lies inside its "
                                                   "interval."),
    concurrency: int = typer.Option(8, min=1, help="Judge requests in flight."),
    cache_dir: Optional[Path] = typer.Option(None, help="Verdict cache folder (default: "
                                             "$SOLM_CACHE/judge)."),
    batch_size: Optional[int] = typer.Option(None, min=1, help="Requests decoded together "
                                             "(default: 16 on a CPU, 32 on CUDA)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N prompts."),
    engine: str = engine_option(also="Samples are parallel decodes: llama.cpp needs an overlap "
                                     "model for them; the baseline's answers are sequential."),
    gguf_type: str = gguf_type_option(),
    shard: Optional[str] = ShardOption,
    seed: int = SeedOption,
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    restart: bool = RestartOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.core.generation import resolve_decode
    from solm.core.models import default_device
    from solm.core.provenance import file_sha256, guard_folder, write_manifest
    from solm.core.records import load_records
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.batched import default_batch_size
    from solm.decode.pasta.system import batched_on_engine
    from solm.engines import recorded_choice
    from solm.decode.pasta.format_stats import is_well_formed
    from solm.prefs import job

    weight = _quality_weight(quality_weight)
    part, device = sharded(shard, device)
    out = folder_output(out, part, "prefs")
    check_paths([p for p in (prompts, baseline, judge_agreement) if p],
                [out / n for n in ("samples.jsonl", "pairs.jsonl", "scored.jsonl",
                                   "baseline.jsonl", "judgments.jsonl", "summary.json")])
    agreement = _read_agreement(judge_agreement) if judge_agreement else None
    given = _read_baseline(baseline) if baseline is not None else None
    decoding = resolve_decode(model, {"temperature": temperature, "top_p": top_p,
                                      "repetition_penalty": repetition_penalty})
    row_settings = {
        "model": model, "prompts": file_sha256(prompts),
        "baseline": f"file sha256 {file_sha256(baseline)}" if baseline else baseline_model,
        "samples": samples, "max_new_tokens": max_new_tokens, "seed": seed,
        "judge": judge if weight != 0 and score == "thesis" else None,
        "dtype": dtype, **{k: v for k, v in decoding.values.items()},
        **recorded_choice(engine, gguf_type=gguf_type)}
    # The scoring (λ, μ, ν, the length floor, speed, score) is not part of the folder's
    # identity: scored.jsonl and pairs.jsonl are rewritten whole from the samples each run,
    # so a rerun with other weights rescores the samples it has instead of being refused.
    aside = guard_folder(out, row_settings, restart, RESULT_FILES)
    if aside is not None:
        info(f"--restart: the earlier results were moved into {aside}")
    all_records = list(load_records(prompts))
    records = all_records[:limit] if limit is not None else all_records
    if not records:
        raise SolmError(f"{prompts}: no prompts")
    records = take_shard(part, records, out, folder=True)
    if not records:
        return
    records = _with_earlier(records, all_records, out)
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, "pasta prefs", settings_from(locals()), inputs=[prompts, baseline],
                   model=model, row_settings=row_settings)
    cfg = job.PrefsConfig(samples=samples, max_new_tokens=max_new_tokens,
                          quality_weight=weight, min_length_ratio=min_length_ratio,
                          speed=speed, model=model, score=score,
                          repeat_weight=repeat_weight, guard_weight=guard_weight,
                          sampling=SamplingConfig(**{**decoding.values, "seed": seed}))
    summary = job.PrefsSummary(prompts=len(records), samples=len(records) * samples)

    info(f"loading {model} ...")
    batch = batch_size or default_batch_size(device or default_device())
    pool = batch * (max_new_tokens + 1024)
    rt, sampled_on = batched_on_engine(model, "parallel", engine, gguf_type, dtype, device,
                                       pool, batch)
    tok = rt.tokenizer
    with job.timed(summary, "baseline"):
        if given is not None:
            base = job.given_baseline(tok, records, given, str(baseline))
        else:
            info(f"loading {baseline_model} ...")
            base_rt, base_on = batched_on_engine(baseline_model, "sequential", engine,
                                                 gguf_type, dtype, device, pool, batch)
            cfg.baseline_sampling = SamplingConfig(**resolve_decode(baseline_model, {}).values)
            with progress(f"Baseline-SFT answers ({baseline_model}, {base_on})",
                          len(records)) as adv:
                base = job.baseline_answers(base_rt, records, out, cfg, on_done=adv)
            del base_rt
    with job.timed(summary, "sampling"):
        with progress(f"sampling {samples} per prompt ({model}, {sampled_on})",
                      len(records) * samples) as adv:
            drawn, summary.samples_decoded_now = job.sample_answers(rt, records, out, cfg,
                                                                    seed, on_done=adv)
    references = {r.id: {job.BASELINE: base[r.id]["response"],
                         **({job.DATASET: r.response} if r.response else {})}
                  for r in records}
    judgments = None
    if weight != 0 and score == "thesis":
        judgments = _judge(judge, concurrency, cache_dir, records, drawn, references, out,
                           summary)
    def well_formed(row: dict) -> bool:
        return is_well_formed(row["annotated"], row["flags"])

    job.write_results(out, records, drawn, base, judgments, references, cfg, well_formed,
                      summary)
    extra = {"model": model, "baseline": str(baseline) if baseline else baseline_model,
             "quality_weight": "inf" if math.isinf(weight) else weight,
             "judge": judge if weight != 0 and score == "thesis" else None,
             "decoding": decoding.describe(), "score": score,
             "min_length_ratio": min_length_ratio, "speed": speed,
             "judge_agreement": agreement}
    data = job.write_summary(out, summary, extra)
    write_manifest(out, "pasta prefs", settings_from(locals()), inputs=[prompts, baseline],
                   model=model, row_settings=row_settings, extra={"summary": data})
    finish_shard(part, out, folder=True)
    if agreement and agreement.get("chance_inside_interval"):
        console.print(f"[yellow]warning:[/] the judge's agreement with the published annotator "
                      f"({agreement.get('agreement')}) has chance (50%) inside its interval "
                      f"{agreement.get('interval')}: its quality scores may be noise")
    out_console.print_json(json.dumps({k: data[k] for k in (
        "prompts", "samples", "pairs", "skipped", "distinct_mean", "well_formed_rate",
        "chosen_mean_speedup", "rejected_mean_speedup", "chosen_mean_quality",
        "rejected_mean_quality", "seconds")}))


def _judge(spec, concurrency, cache_dir, records, drawn, references, out, summary):
    from solm.core.llm import make_client
    from solm.core.models import cache_root
    from solm.judge.cache import VerdictCache
    from solm.judge.job import JudgeConfig
    from solm.prefs import job
    from solm.prefs.score import distinct

    comparisons = sum(len(distinct([s["ids"] for s in drawn[r.id]])) * len(references[r.id])
                      for r in records)
    client = make_client(spec, batch_size=concurrency)
    with job.timed(summary, "judging"), progress(f"judging with {client.spec}",
                                                 comparisons) as adv:
        rows, js = job.judge_samples(client, JudgeConfig(concurrency=concurrency),
                                     VerdictCache(cache_dir or cache_root() / "judge"),
                                     records, drawn, references, out,
                                     on_update=judge_progress(adv))
    summary.judged, summary.judge_cache_hits = js.judged, js.cache_hits
    summary.judge_rejected = sum(js.rejected.values())
    return rows


def _with_earlier(records: list, all_records: list, out: Path) -> list:
    """This run's prompts plus those the folder already sampled (a rerun with a smaller
    --limit keeps their pairs instead of rewriting pairs.jsonl smaller), in file order."""
    from solm.core.jsonl import read_jsonl

    path = out / "samples.jsonl"
    if not path.exists():
        return records
    sampled = {str(r.get("id")) for r in read_jsonl(path, skip_partial_last_line=True)}
    mine = {r.id for r in records}
    earlier = [r for r in all_records if r.id in sampled and r.id not in mine]
    if not earlier:
        return records
    info(f"{out}: {len(earlier)} prompt(s) sampled by an earlier run beyond this --limit are "
         f"kept in pairs.jsonl and summary.json")
    keep = mine | {r.id for r in earlier}
    return [r for r in all_records if r.id in keep]


def _read_baseline(path: Path) -> dict[str, str]:
    """id -> answer from a JSONL of Baseline-SFT answers (`id` plus `response` or `output`)."""
    from solm.core.errors import DataError
    from solm.core.jsonl import read_rows_located

    given = {}
    for where, row in read_rows_located(path):
        if not isinstance(row, dict):
            raise DataError("expected an object", path=where)
        if row.get("id") is None:
            raise DataError("missing field 'id'", path=where)
        answer = row.get("response", row.get("output"))
        if not isinstance(answer, str):
            raise DataError("missing field 'response' (or 'output'), a string", path=where)
        given[str(row["id"])] = answer
    if not given:
        raise SolmError(f"{path}: no Baseline-SFT answers")
    return given


def _read_agreement(path: Path) -> dict:
    from solm.core.jsonl import read_json_file

    data = read_json_file(path, "judge agreement")
    if not isinstance(data, dict) or "agreement" not in data:
        raise SolmError(f"{path}: not a `pasta eval agreement` output (no 'agreement' field)")
    return data
