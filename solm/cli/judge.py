"""`pasta judge` (also `solm judge`): compare two output files pair by pair with an LLM judge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.core.errors import SolmError

from solm.cli.checks import check_paths, greater_than, one_of
from solm.cli.console import console, judge_progress, out_console, progress
from solm.cli.flags import (model_command, out_option, model_option, ConfigOption,
                            DebugOption, ForceOption, QuietOption)
from solm.cli.job_helpers import settings_from
from solm.cli.checks import judge_spec as check_judge_spec

JUDGE_HELP = """Judge a model's outputs against a baseline's, pair by pair, with an LLM judge.

Each pair is asked in both orders (the model's output shown first, then the baseline's) and
the two verdicts combined, which cancels a judge's lean towards a position (reported as
`position_bias`). Every single-order verdict is cached on disk by judge, prompt version,
instruction and both responses in order, so a rerun, or another evaluation sharing
comparisons, sends no request for them.

Output: one JSONL row per pair in AlpacaEval's annotation format (`instruction`, `output_1` =
baseline, `output_2` = model, `generator_1/2`, `preference` in [1, 2], 2 = the model better,
fractional = soft) plus `p_2`, `winner`, `confidence`, the two single-order verdicts, judge
and prompt version. `pasta eval winrate --annotations OUT` turns it into win rates.

Outputs files: JSONL or a JSON list with `instruction` (or `prompt`) and `output` (or
`response`), optionally `id` and `generator` (`pasta decode` output and AlpacaEval's
`model_outputs.json` both work). Rows are paired by id, else by instruction.

**Judges** (`--judge`, the same backends as `pasta annotate`):

- `openai:MODEL[@URL]`: any OpenAI-compatible server; the verdict's confidence comes from the
  log-probabilities of the one-token answer `A`/`B` (AlpacaEval's weighted annotator).
- `gemini:MODEL[@URL]`: by default asks for a JSON verdict with a stated confidence
  (`--mode token` asks for log-probabilities where the model returns them).
- `hf:MODEL`: a local model; log-probabilities from its own distribution.

Example: `pasta judge --baseline base.jsonl --model pasta.jsonl -o judged.jsonl --judge hf:smollm2-135m`
"""


@model_command
def judge(
    baseline: Path = typer.Option(..., "--baseline", "-b", help="The baseline's outputs "
                                  "(output_1)."),
    model: Path = model_option(..., help="The outputs being evaluated "
                               "(output_2)."),
    output: Path = out_option(..., flag="--output", help="Judgments are appended here; a "
                                "rerun skips pairs already judged."),
    judge_spec: str = typer.Option("hf:smollm2-135m", "--judge", "-j",
                                   callback=check_judge_spec, help="Judge backend: "
                                   "gemini:MODEL[@URL], openai:MODEL[@URL] or hf:MODEL."),
    mode: str = typer.Option("auto", callback=one_of("auto", "token", "reply"),
                             help="token: one-letter answer read through log-probabilities; "
                                  "reply: a JSON verdict with a confidence; auto: reply for "
                                  "gemini, token elsewhere."),
    rejects: Optional[Path] = typer.Option(None, help="Pairs the judge could not decide, with "
                                           "the reason (default: OUTPUT with .rejects.jsonl)."),
    cache_dir: Optional[Path] = typer.Option(None, help="Verdict cache folder (default: "
                                             "$SOLM_CACHE/judge)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the cache."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N pairs."),
    concurrency: int = typer.Option(8, min=1, help="Requests in flight."),
    rpm: Optional[float] = typer.Option(None, callback=greater_than(0),
                                        help="Requests per minute (token bucket)."),
    max_tries: int = typer.Option(4, min=1, help="Tries per verdict (429/5xx/timeouts/"
                                  "unreadable replies)."),
    timeout: float = typer.Option(120.0, callback=greater_than(0), help="Seconds per request."),
    base_url: Optional[str] = typer.Option(None, help="Server URL (overrides the spec's)."),
    top_logprobs: Optional[int] = typer.Option(None, min=1, max=1000, help="token mode: "
                                               "alternatives asked for per token (default: 20 "
                                               "for API backends, OpenAI's most; 100 for hf)."),
    force: bool = ForceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.core.llm import make_client
    from solm.core.models import cache_root
    from solm.core.provenance import check_rerun_settings, write_manifest
    from solm.judge.cache import VerdictCache
    from solm.judge.job import (JudgeConfig, judge_version, resolve_mode,
                                resolve_top_logprobs, run_judge_job)
    from solm.judge.pairs import make_pairs, read_outputs

    rejects = rejects or output.with_name(output.stem + ".rejects.jsonl")
    from solm.core.paths import outputs_beside

    check_paths([baseline, model], [*outputs_beside(output), rejects])
    base_rows, model_rows = read_outputs(baseline), read_outputs(model)
    for path, rows in ((baseline, base_rows), (model, model_rows)):
        if not rows:
            raise SolmError(f"{path}: no outputs in the file; nothing was judged")
    pairs = make_pairs(base_rows, model_rows, limit)
    if not pairs:
        raise SolmError(f"{model}: no row pairs with a row of {baseline} (by instruction); "
                        f"nothing was judged")
    unpaired = len(model_rows) - len(pairs) if limit is None else 0
    if unpaired:
        console.print(f"[yellow]warning:[/] {unpaired} row(s) of {model} have no partner in "
                      f"{baseline}; left out")
    client = make_client(judge_spec, base_url=base_url, timeout=timeout,
                         batch_size=concurrency)
    cfg = JudgeConfig(concurrency=concurrency, rpm=rpm, max_tries=max_tries, mode=mode,
                      top_logprobs=top_logprobs)
    folder = None if no_cache else (cache_dir or cache_root() / "judge")
    version = judge_version(resolve_mode(mode, client.spec),
                            resolve_top_logprobs(top_logprobs, client.spec))
    row_settings = {"judge": client.spec, "prompt_version": version,
                    "baseline": str(baseline), "model": str(model)}
    mixed = check_rerun_settings(output, row_settings, force)
    with progress(f"judging with {client.spec}", len(pairs)) as advance:
        summary = run_judge_job(pairs, client, output, rejects, cfg, VerdictCache(folder),
                                on_update=judge_progress(advance))
    result = {**summary.to_dict(), "unpaired": unpaired, "judge": client.spec,
              "prompt_version": version}
    write_manifest(output, "pasta judge", settings_from(locals()),
                   inputs=[str(baseline), str(model)], model=client.spec,
                   extra={"summary": result}, row_settings=row_settings, mixed=mixed)
    out_console.print_json(json.dumps(result))
