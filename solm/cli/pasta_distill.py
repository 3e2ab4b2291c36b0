"""`pasta distill`: SFT rows from the model's own answers (the job is
`solm.prefs.distill_job`, the rules `solm.annotate.own_answers`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from solm.cli.checks import at_least_below, check_paths, finite_above
from solm.cli.console import info, out_console, progress
from solm.cli.flags import (ConfigOption, DebugOption, DeviceOption, DtypeOption, QuietOption,
                            RepetitionPenaltyOption, SeedOption, ShardOption, engine_option,
                            gguf_type_option, model_command, model_option, out_option)
from solm.cli.job_helpers import (finish_shard, folder_output, settings_from, sharded,
                                  take_shard)
from solm.cli.setting_options import setting_option
from solm.core.errors import SolmError
from solm.core.sampling import SamplingConfig
from solm.decode.pasta.config import PastaDecodeConfig

DISTILL_HELP = """Let the model answer training prompts, and make SFT rows of its own answers.

A 135M model cannot write other writers' answers: trained on them it learns the tags and
loses the content. Here every row is an answer the model wrote itself:

- each prompt is answered greedily (the model's decoding defaults) and --sampled more times
  (--temperature, seed + k), sequentially, batched on the fastest engine (--engine auto);
- an answer is dropped when the token cap cut it, when it is empty, or when more than
  --max-repeated-3grams of its token 3-grams repeat an earlier one;
- the speed-shaped rules annotate it (`pasta annotate --shape speed`), and an annotation is
  used only if its tokens with the tags taken out are the sampled tokens, token for token;
- per prompt, the answer with the highest annotation-level gain goes in as a parallel row
  when its gain reaches --min-gain; otherwise the prompt offers a plain row, and plain rows
  make --plain-share of the mix.

OUT (a folder) receives answers.jsonl (appended as answers end: rerun after a kill and it
resumes), candidates.jsonl (every answer judged), rows.jsonl (for `pasta sft --data`; with
`--strip-annotations` the same rows train Baseline-SFT) and summary.json. Never distill an
evaluation prompt: --exclude takes the evaluation's prompts file and leaves them out.

Examples:

- `solm data get dolly && pasta distill -p ~/.cache/solm/data/dolly.jsonl --limit 1000 --exclude ~/.cache/solm/data/alpaca_eval.jsonl -o runs/own`
- `pasta sft --data runs/own/rows.jsonl --out runs/own-sft` and `pasta sft --data runs/own/rows.jsonl --strip-annotations --out runs/own-baseline`
"""

RestartOption = typer.Option(False, "--restart", help="OUT holds answers made with another "
                             "model, prompts file or settings: move them into "
                             "OUT/previous-TIME/ and start again (without it such a rerun "
                             "is refused).")


def prompt_pattern(match: str | None):
    """--match as a compiled case-insensitive pattern (None: every prompt)."""
    import re

    if match is None:
        return None
    try:
        return re.compile(match, re.IGNORECASE)
    except re.error as e:
        raise typer.BadParameter(f"not a regular expression: {e}", param_hint="--match")


@model_command
def distill(
    prompts: Path = typer.Option(..., "--prompts", "-p", help="JSONL of training prompts "
                                 "(any row format `pasta decode` reads)."),
    out: Path = out_option(..., help="Output folder (resumable)."),
    model: str = model_option("smollm2-135m", help="The model whose own answers become "
                              "rows (the one SFT will start from)."),
    sampled: int = typer.Option(1, "--sampled", "-n", min=1, help="Sampled answers per prompt "
                                "beside the greedy one."),
    temperature: float = setting_option(SamplingConfig, "temperature", 0.7,
                                        why="the sampled answers beside the greedy one"),
    top_p: float = setting_option(SamplingConfig, "top_p"),
    repetition_penalty: Optional[float] = RepetitionPenaltyOption,
    max_new_tokens: int = setting_option(PastaDecodeConfig, "max_new_tokens",
                                         help_suffix=" An answer not ended by then is dropped "
                                         "as cut; a rerun with a larger cap continues the cut "
                                         "answers instead of sampling them again."),
    min_gain: float = typer.Option(1.3, callback=finite_above(1.0), help="A prompt's best "
                                   "answer is a parallel row when its annotation-level gain "
                                   "(content tokens per forward pass) reaches this. Must be "
                                   "above 1."),
    plain_share: float = typer.Option(0.4, callback=at_least_below(0.0, 1.0), help="Share of "
                                      "plain rows in the mix (as many as prompts offer). Must "
                                      "be in [0, 1)."),
    max_repeated_3grams: float = typer.Option(0.15, min=0.0, max=1.0, help="An answer with a "
                                              "larger share of token 3-grams repeating an "
                                              "earlier one is dropped."),
    paragraphs_together: bool = typer.Option(True, "--paragraphs-together/--paragraphs-apart",
                                             help="Consecutive paragraphs fork in one group "
                                             "(each keeps its first sentence in the main "
                                             "thread), or each alone (a lone fork runs beside "
                                             "nothing: it never pays)."),
    exclude: Optional[List[Path]] = typer.Option(None, "--exclude", help="Prompts files whose "
                                                 "prompts are left out (the evaluation's); "
                                                 "repeatable."),
    match: Optional[str] = typer.Option(None, "--match", help="Only prompts this regular "
                                        "expression finds (case-insensitive), e.g. prompts "
                                        "that ask for lists, steps or ideas, whose answers "
                                        "fork: a one-paragraph answer runs beside nothing."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N prompts (after "
                                        "--exclude and --match)."),
    batch_size: Optional[int] = typer.Option(None, min=1, help="Requests decoded together "
                                             "(default: 16 on a CPU, 32 on CUDA)."),
    engine: str = engine_option("auto", why="the engine measured fastest here",
                                also="Answers are sequential decodes: every engine runs them."),
    gguf_type: str = gguf_type_option(),
    shard: Optional[str] = ShardOption,
    seed: int = SeedOption,
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    rows_only: bool = typer.Option(False, "--rows-only", help="Judge and mix the answers "
                                   "decoded so far, decode nothing: stop sampling early, "
                                   "train on what is there, rerun without it later to go on."),
    restart: bool = RestartOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    import time

    from solm.prefs import distill_job as job
    from solm.annotate.mix import prompt_key
    from solm.annotate.own_answers import OwnAnswerRules
    from solm.core.generation import resolve_decode
    from solm.core.chat import prompt_ids
    from solm.core.models import default_device, load_tokenizer
    from solm.core.provenance import file_sha256, guard_folder, write_manifest
    from solm.core.records import load_records
    from solm.decode.jobs import undone
    from solm.decode.pasta.batched import default_batch_size
    from solm.decode.pasta.system import batched_on_engine
    from solm.engines import recorded_choice

    wanted = prompt_pattern(match)
    part, device = sharded(shard, device)
    out = folder_output(out, part, "distill")
    exclude = list(exclude or [])
    check_paths([prompts, *exclude], [out / n for n in job.RESULT_FILES])
    greedy = resolve_decode(model, {"temperature": 0.0,
                                    "repetition_penalty": repetition_penalty})
    decoding = resolve_decode(model, {"temperature": temperature, "top_p": top_p,
                                      "repetition_penalty": repetition_penalty})
    rules = OwnAnswerRules(min_gain=min_gain, plain_share=plain_share,
                           max_repeated_3grams=max_repeated_3grams,
                           paragraphs_together=paragraphs_together)
    row_settings = {"model": model, "prompts": file_sha256(prompts), "match": match,
                    "sampled": sampled, "seed": seed, "dtype": dtype,
                    "greedy": greedy.values, "sampling": decoding.values,
                    **recorded_choice(engine, gguf_type=gguf_type)}
    aside = guard_folder(out, row_settings, restart, job.RESULT_FILES)
    if aside is not None:
        info(f"--restart: the earlier results were moved into {aside}")
    banned = {prompt_key(r.prompt) for path in exclude for r in load_records(path)}
    records, excluded = [], 0
    for r in load_records(prompts):
        if prompt_key(r.prompt) in banned:
            excluded += 1
        elif wanted is None or wanted.search(r.prompt):
            records.append(r)
    records = records[:limit] if limit is not None else records
    if not records:
        raise SolmError(f"{prompts}: no prompts" + (f" ({excluded} excluded)" if excluded
                                                     else "") +
                        (f" matching --match {match!r}" if match else ""))
    records = take_shard(part, records, out, folder=True)
    if not records:
        return
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, "pasta distill", settings_from(locals()), inputs=[prompts, *exclude],
                   model=model, row_settings=row_settings)
    cfg = job.DistillConfig(sampled=sampled, max_new_tokens=max_new_tokens, rules=rules,
                            greedy=SamplingConfig(**{**greedy.values, "seed": seed}),
                            sampling=SamplingConfig(**{**decoding.values, "seed": seed}))
    summary = job.DistillSummary(prompts=len(records), excluded=excluded)
    cut = job.cut_answers(out, records, cfg)
    left = undone(records, out / job.ANSWERS, cfg.answers_per_prompt, per_sample=True) + len(cut)
    started = time.perf_counter()
    if rows_only:
        from solm.core.vocabulary import add_control_tokens

        tokenizer = load_tokenizer(model)
        add_control_tokens(None, tokenizer, "pasta")
        earlier = out / job.SUMMARY
        engine_used = (json.loads(earlier.read_text()).get("engine") if earlier.exists()
                       else None)
        summary.answers_left = left
        info(f"--rows-only: {left} answers left undecoded")
    else:
        info(f"loading {model} ...")
        batch = batch_size or default_batch_size(device or default_device())
        tokenizer = load_tokenizer(model)
        longest = max(len(prompt_ids(tokenizer, r.prompt, r.system)) for r in records)
        rt, engine_used = batched_on_engine(model, "sequential", engine, gguf_type, dtype,
                                            device, batch * (max_new_tokens + longest), batch,
                                            independent=True)
        tokenizer = rt.tokenizer
        with progress(f"answering ({model}, {engine_used}; greedy + {sampled} sampled)",
                      left) as advance:
            summary.answers_decoded_now = job.decode_answers(rt, records, out, cfg, seed,
                                                             cut, on_done=advance)
    summary.seconds["answers"] = round(time.perf_counter() - started, 1)
    answers = job.read_answers(out, records, cfg.answers_per_prompt)
    started = time.perf_counter()
    job.build_rows(out, records, answers, job.answer_judge(tokenizer, rules), rules,
                   summary)
    summary.seconds["rows"] = round(time.perf_counter() - started, 1)
    extra = {"model": model, "engine": engine_used, "greedy": greedy.describe(),
             "sampling": decoding.describe(), "rules": rules.__dict__}
    data = job.write_summary(out, summary, extra)
    write_manifest(out, "pasta distill", settings_from(locals()), inputs=[prompts, *exclude],
                   model=model, row_settings=row_settings, extra={"summary": data})
    finish_shard(part, out, folder=True)
    out_console.print_json(json.dumps({k: data[k] for k in (
        "prompts", "excluded", "answers", "dropped", "annotated_answers", "parallel_rows",
        "plain_rows", "plain_share", "geomean_gain_parallel", "seconds")}))
    line, empty = job.distill_verdict(summary)
    if empty and not summary.answers_left:  # (--rows-only with answers left: not final)
        raise SolmError(f"{out / job.ROWS}: {line}")
    info(line)
