"""`pasta`: annotate responses with Pasta-Lang, decode with the asynchronous runtime, benchmark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.cli.checks import check_paths
from solm.cli.console import console, handle_errors, info, is_quiet, out_console, progress
from solm.cli.flags import (model_command, out_option, ConfigOption, DebugOption, DedupeOption,
                            DEFAULT_MODEL, ForceOption, ModelOption, QuietOption, SplitOption,
                            VersionOption)
from solm.cli.job_helpers import (annotation_records, llm_annotation, settings_from,
                                  show_control_tokens)
from solm.cli.errors import command_group
from solm.cli.decode_command import decode_command
from solm.cli.options import llm_options, train_command
from solm.cli.judge import JUDGE_HELP, judge
from solm.cli.pasta_eval import app as eval_app
from solm.cli.serve import SERVE_HELP, serve
from solm.cli.pasta_bench import bench
from solm.cli.pasta_chat import chat
from solm.cli.pasta_demo import demo
from solm.cli.pasta_distill import DISTILL_HELP, distill
from solm.cli.pasta_prefs import PREFS_HELP, prefs
from solm.train.bonbon import BonbonConfig
from solm.train.sft import PastaSFTConfig

app = command_group(
    "pasta",
    "PASTA: models that promise independent chunks, decoded as parallel threads.\n\n"
    "Pipeline: `annotate` -> `sft`; run with `decode`, `chat` or `serve`, measure with "
    "`bench` and `eval`.")


ANNOTATE_HELP = """Annotate plain responses with Pasta-Lang; resumable, faithful.

Rerunning the same command skips every id already in the output or the rejects file, so a
killed run loses at most the requests in flight. Each LLM annotation is checked: it parses,
has no nesting, `strip()` gives back the response (whitespace aside), and each `tokens="N"`
matches its block (`--fix-lengths` recomputes N instead of rejecting).

**Annotators** (`--annotator`):

- `rules`: APAR-style syntactic rules (list items, paragraphs); no model, no key.
  `pasta annotate -i dolly.jsonl -o ann.jsonl --limit 500`. `--shape speed` lays forks out
  for speed: one-word topics, an item's header moved into its block, no fork shorter than
  its promise, and a group of forks left plain when it does not pay (fewer forward passes
  than content tokens). Each rules row carries its annotation-level `gain` (content tokens
  per forward pass if a model wrote exactly this annotation; `pasta stats` sums them up).
- `gemini:MODEL[@URL]`: Gemini via google-genai; key from `GEMINI_API_KEY` or `GOOGLE_API_KEY`.
  `pasta annotate -i slimorca.jsonl -o ann.jsonl --annotator gemini:gemini-1.5-flash --concurrency 32 --rpm 1000`
- `openai:MODEL[@URL]`: any OpenAI-compatible server (OpenAI, vLLM, llama.cpp server, Ollama);
  key from `OPENAI_API_KEY` (local servers need none), URL also from `--base-url` / `OPENAI_BASE_URL`.
  `pasta annotate -i data.jsonl -o ann.jsonl --annotator openai:Qwen2.5-72B-Instruct@http://gpu-box:8000/v1`
- `hf:MODEL`: a local Hugging Face model through transformers (batched).
  `pasta annotate -i data.jsonl -o ann.jsonl --annotator hf:smollm2-135m --limit 20`
"""


@app.callback()
def main(version: bool = VersionOption) -> None:
    """Keeps the app a command group and gives it `--version`."""


@app.command(help=ANNOTATE_HELP)
@handle_errors
@llm_options
def annotate(
    input: str = typer.Option(..., "--input", "-i", help="JSONL of responses (ShareGPT, Alpaca, "
                              "OpenAI messages or prompt/response), `-` for standard input, or "
                              "a hub dataset name."),
    output: Path = out_option(..., flag="--output", help="Accepted rows are appended here "
                                "(`-`: standard output; the summary goes to standard error)."),
    annotator: str = typer.Option("rules", help="`rules`, `gemini:MODEL[@URL]`, "
                                  "`openai:MODEL[@URL]` or `hf:MODEL` (see above)."),
    rejects: Optional[Path] = typer.Option(None, help="Rejected rows with a reason "
                                           "(default: OUTPUT with .rejects.jsonl; under `-o -` "
                                           "none unless given)."),
    tokenizer: str = typer.Option(DEFAULT_MODEL, help="Tokenizer that counts chunk lengths."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only N rows (the first N, or a random N "
                                        "with --seed)."),
    seed: Optional[int] = typer.Option(None, help="With --limit: a seeded random subset."),
    min_chunk_tokens: int = typer.Option(12, min=1, help="rules: shorter descriptions stay in the "
                                         "main thread."),
    shape: str = typer.Option("apar", help="rules: `apar` (headers and first sentences stay "
                              "in the main thread, topics up to 4 words) or `speed` (see above)."),
    topic_words: Optional[int] = typer.Option(None, min=1, help="rules: words in a topic "
                                              "(default: the shape's)."),
    fix_lengths: bool = typer.Option(False, help="LLM: recompute tokens=N from the real block."),
    split: str = SplitOption,
    dedupe: bool = DedupeOption,
    force: bool = ForceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
    **llm,
) -> None:
    from solm.annotate.pipeline import annotate_rules_job
    from solm.annotate.rules import RuleShape
    from solm.core.models import load_tokenizer
    from solm.core.provenance import check_rerun_settings, write_manifest
    import os

    from solm.core.jsonl import is_stdio

    # under `-o -` rejected rows are only counted (stderr summary) unless --rejects names a file
    rejects = rejects or (Path(os.devnull) if is_stdio(output)
                          else output.with_name(output.stem + ".rejects.jsonl"))
    from solm.core.paths import outputs_beside

    check_paths([input], [*outputs_beside(output), rejects])
    from solm.annotate.prompt import prompt_version

    if shape not in ("apar", "speed"):
        raise typer.BadParameter("choose apar or speed", param_hint="--shape")
    rule_shape = (RuleShape.speed if shape == "speed" else RuleShape)(
        min_chunk_tokens=min_chunk_tokens,
        **({"topic_words": topic_words} if topic_words else {}))
    row_settings = {"annotator": annotator, "tokenizer": tokenizer,
                    "min_chunk_tokens": min_chunk_tokens, "fix_lengths": fix_lengths,
                    "shape": shape, "topic_words": rule_shape.topic_words,
                    "temperature": llm["temperature"],
                    "max_output_tokens": llm["max_output_tokens"],
                    "prompt_version": None if annotator == "rules" else prompt_version()}
    mixed = check_rerun_settings(output, row_settings, force,
                                 defaults={"shape": "apar", "topic_words": RuleShape.topic_words})
    tok = load_tokenizer(tokenizer)
    count = lambda s: len(tok(s, add_special_tokens=False).input_ids)  # noqa: E731
    records = annotation_records(input, split, limit, seed, dedupe)
    extra: dict = {}
    if annotator == "rules":
        from solm.annotate.gain import gain_meter

        with progress("annotating", len(records)) as advance:
            summary = annotate_rules_job(
                records, output, rejects, count, shape=rule_shape,
                gain_of=gain_meter(tokenizer),
                on_row=lambda s: advance(status=f"annotated {s.annotated} plain "
                                                f"{s.unannotated} rejected "
                                                f"{sum(s.rejected.values())}"))
    else:
        from solm.annotate.llm_job import LLMAnnotatorSettings

        settings = LLMAnnotatorSettings(**llm)
        cfg = settings.job_config(fix_lengths=fix_lengths)
        extra["prompt_version"] = prompt_version()
        summary = llm_annotation(records, annotator, output, rejects, count, cfg,
                                 settings.base_url, settings.timeout)
    write_manifest(output, "pasta annotate", settings_from(locals()), inputs=[input],
                   model=tokenizer, extra={"summary": summary.to_dict(), **extra},
                   row_settings=row_settings, mixed=mixed)
    (console if is_stdio(output) else out_console).print_json(json.dumps(summary.to_dict()))


SFT_HELP = """Finetune a model to write Pasta-Lang (Pasta-SFT), or the same rows without tags
(`--strip-annotations`: Baseline-SFT).

Masks, Pred-10X positions and targets come from solm.core's `structure()`: no token sees into
an async block before `<sync/>`, and a promise's target is the first token after its block.
Prompt tokens carry no loss. Defaults are the paper's schedule (lr 1e-5 decaying linearly to 0,
4 epochs, global batch 8 by gradient accumulation).

OUT receives a normal `save_pretrained` folder (tokenizer with control tokens, `solm.json`
with parent model, data hash and settings, `train_log.jsonl`, `loss.png`); `pasta decode
--model OUT` loads it. Checkpoints go to OUT/checkpoints: rerun the same command after a kill
and training resumes from the last one.

Examples:

- CPU, embedded model: `pasta sft --data ann.jsonl --out runs/pasta-sft --lr 1e-4 --epochs 1 --max-len 384`
- LoRA with merged output: `pasta sft --data ann.jsonl --out ckpt --lora-r 16 --merge`
- Many GPUs: `accelerate launch --config_file configs/accelerate/ddp.yaml -m solm.cli.main pasta sft --config configs/pasta_sft_gpu.yaml`
"""


train_command(app, "sft", SFT_HELP, PastaSFTConfig, "solm.train.sft:PastaSFTTrainer",
              lambda t, c: f"{t.system}-sft of {c.model} on {c.data} -> {c.out}")

BONBON_HELP = """BoNBoN training on `pasta prefs` pairs: alpha x SFT + (1 - alpha) x IPO.

The loss (Gui, Garbacea & Veitch 2024) uses summed log-probs of whole answers, scored under the
structure they were sampled under (masks, Pred-10X positions, promise targets; tokens the
runtime forced are left out): alpha x (NLL of the chosen answer) + (1 - alpha) x (h - T_n)^2,
where h is the policy-minus-reference log-ratio of the chosen minus that of the rejected answer
and T_n = (n - 1)(1 + 1/2 + ... + 1/(n - 1)) is the best-of-n margin for n distinct samples.
The reference is the parent (--model: this round's starting checkpoint, a LoRA artifact
included), frozen: its log-probs are computed once before training. Held-out pairs log their
loss and implicit reward margin (`eval_margin`) at each evaluation.

Defaults are the thesis' (alpha 0.005, lr 5e-7); everything else is `pasta sft`'s (LoRA or
full, bf16, resume, many GPUs, solm.json with parent and pairs file).

Examples:

- CPU, one round on the kept SFT model: `pasta bonbon --data runs/r1/pairs.jsonl --model pasta-sft-cpu --out runs/r1/bonbon --lora-r 16 --lr 1e-5`
- The next round starts from this one: `pasta prefs --model runs/r1/bonbon ... && pasta bonbon --model runs/r1/bonbon ...`
"""


train_command(app, "bonbon", BONBON_HELP, BonbonConfig, "solm.train.bonbon:BonbonTrainer",
              lambda t, c: f"bonbon (alpha {c.alpha:g}) of {c.model} on {c.data} -> {c.out}")

app.command(name="prefs", help=PREFS_HELP)(prefs)
app.command(name="distill", help=DISTILL_HELP)(distill)


PASTA_DECODE_HELP = """Decode prompts; promised chunks run as parallel threads in one shared KV pool.

Input: JSONL, one prompt per line, as `{"id": "q1", "prompt": "..."}` or Alpaca
(`instruction`/`input`), ShareGPT (`conversations`) or OpenAI `messages` rows; `-` reads
standard input. Output: one JSON row per prompt (response, annotated text, promises,
critical path, parallelism, timings, flags), appended; a rerun resumes.

Examples:

- `pasta decode -m pasta-sft-cpu "Give three tips for staying healthy." --compare`
- `solm data get alpaca_eval && pasta decode -m pasta-sft-cpu -p ~/.cache/solm/data/alpaca_eval.jsonl --limit 50 -o out.jsonl`
- `cat prompts.jsonl | pasta decode -p - -o - | pasta stats -`
"""

decode_command(app, "pasta", PASTA_DECODE_HELP)


app.command(name="chat")(chat)


app.command(name="demo")(demo)


app.command(name="serve", help=SERVE_HELP)(serve)
app.command(name="judge", help=JUDGE_HELP)(judge)
app.add_typer(eval_app, name="eval")


@app.command()
@handle_errors
def stats(
    files: list[Path] = typer.Argument(..., help="Outputs of `pasta decode` or of `pasta "
                                       "annotate` (`-` reads standard input)."),
    tokenizer: str = typer.Option(DEFAULT_MODEL, help="Annotated files: measures the gain of "
                                  "rows that do not carry one."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Statistics of decode outputs: well-formed Pasta-Lang, rows with a promise, and (*over
    rows with a promise) parallelism = tokens decoded per forward pass and content speedup =
    text tokens (tags removed) per forward pass; tokens/s.

    Of annotated files (`pasta annotate` rows): the **annotation-level gain**, content tokens
    per forward pass if a model wrote exactly each row's annotation (a plain row gains 1),
    over rows with >= 2 promises: geometric mean, median, rows reaching 1.3 and 1.5."""
    from rich.table import Table
    from solm.annotate.gain import annotation_stats, gain_meter, is_annotation_file
    from solm.decode.pasta.format_stats import format_stats, read_decode_rows

    annotations = [p for p in files if is_annotation_file(p)]
    meter = gain_meter(tokenizer) if annotations else None
    results = {str(p): (annotation_stats(p, meter) if p in annotations
                        else format_stats(read_decode_rows(p)).to_dict()) for p in files}
    decoded = {n: st for n, st in results.items() if "well_formed" in st}
    if decoded and not is_quiet():
        table = Table("file", "rows", "well-formed", "with promise", "parallelism*",
                      "content speedup*", "tokens", "tok/s")
        for name, st in decoded.items():
            table.add_row(name, str(st["rows"]), f"{st['well_formed']:.0%}",
                          f"{st['with_promise']:.0%}",
                          f"{st['mean_parallelism_with_promise']:.2f}",
                          f"{st['mean_content_speedup_with_promise']:.2f}",
                          f"{st['mean_content_tokens']:.0f}", f"{st['tokens_per_s']:.1f}")
        info(table)
    if annotations and not is_quiet():
        table = Table("file", "rows", ">= 1 promise", ">= 2 promises", "gain (geomean)",
                      "gain (median)", "rows >= 1.3", "rows >= 1.5")
        for name, st in results.items():
            if "well_formed" in st:
                continue
            g = st["gain_of_rows_with_2_promises"]
            table.add_row(name, str(st["rows"]), str(st["rows_with_promise"]), str(g["rows"]),
                          f"{g['geomean_gain'] or 0:.3f}", f"{g['median_gain'] or 0:.3f}",
                          str(g["rows_gain_at_least_1.3"]), str(g["rows_gain_at_least_1.5"]))
        info(table)
    out_console.print_json(json.dumps(results))


@app.command()
@handle_errors
def mix(
    annotated: list[Path] = typer.Argument(..., help="Outputs of `pasta annotate` (rows with "
                                           "a `promises` count)."),
    out: Path = out_option(..., help="The SFT rows (JSONL), written whole "
                             "at the end (a make target never sees half a file)."),
    min_promises: int = typer.Option(2, min=1, help="Rows with at least this many promises "
                                     "are the parallel part."),
    plain: int = typer.Option(200, min=0, help="Then the first N rows without a promise."),
    max_parallel: Optional[int] = typer.Option(None, min=1, help="At most N parallel rows "
                                               "(the first N; default: all)."),
    min_gain: Optional[float] = typer.Option(None, min=1.0, help="Keep only parallel rows "
                                             "whose annotation-level gain (content tokens "
                                             "per forward pass of the annotated answer) "
                                             "reaches this."),
    exclude: list[Path] = typer.Option([], help="Prompt files (any format `pasta annotate` "
                                       "reads, e.g. AlpacaEval) whose prompts must not be "
                                       "trained on; repeatable."),
    tokenizer: str = typer.Option(DEFAULT_MODEL, help="Measures the gain of rows annotated "
                                  "without one (an LLM annotator's)."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Build the SFT mix from annotated rows: every row with several promises (in file
    order), then some rows the annotator left plain, so the model also learns when not to
    fork. Prints what it kept: rows, plain rows added, rows excluded as evaluation prompts,
    rows under --min-gain, the kept rows' gain (geometric mean, rows >= 1.3 and >= 1.5) and
    the longest row in tokens (set the trainers' --max-len at least that high to keep it).
    Example: `pasta mix runs/dolly_rules.jsonl runs/orca_rules.jsonl --min-gain 1.3 --plain
    100 --exclude alpaca_eval.jsonl -o runs/sft_rows.jsonl`."""
    from solm.annotate.gain import gain_meter, gain_summary
    from solm.annotate.mix import sft_mix
    from solm.core.jsonl import write_jsonl
    from solm.core.models import load_tokenizer
    from solm.core.records import load_records

    check_paths([*annotated, *exclude], [out])
    banned = [r.prompt for path in exclude for r in load_records(path)]
    meter = gain_meter(tokenizer)
    result = sft_mix(annotated, min_promises, plain, max_parallel, min_gain, meter, banned)
    if not result.rows:
        raise typer.BadParameter("no row qualified: nothing to write", param_hint="annotated")
    write_jsonl(out, result.rows)
    tok = load_tokenizer(tokenizer)
    longest = max(len(tok(r.get("prompt", "") + (r.get("annotated") or r.get("response")
                                                 or ""), add_special_tokens=False).input_ids)
                  for r in result.rows)
    summary = {"out": str(out), "parallel_rows": len(result.parallel),
               "plain_rows_added": len(result.plain), "excluded_eval_prompts": result.excluded,
               "below_min_gain": result.below_gain, "min_gain": min_gain,
               "gain_of_parallel_rows": gain_summary(result.gains),
               "longest_row_tokens": longest}
    info(f"{len(result.parallel)} rows with >= {min_promises} promises + "
         f"{len(result.plain)} plain rows -> {out}")
    out_console.print_json(json.dumps(summary))


app.command(name="bench")(bench)


@app.command()
@model_command
def tokens(
    model: str = ModelOption,
    text: Optional[str] = typer.Option(None, help="Also show how this text tokenizes."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Show Pasta-Lang's control tokens and their ids in a model's tokenizer."""
    from solm.core.control_tokens import pasta_tokens

    tokens = pasta_tokens()
    tok = show_control_tokens(model, "pasta", tokens[:6])
    out_console.print(f"  ... and {len(tokens) - 6} more promise closers up to {tokens[-1]}")
    if text:
        pieces = tok.convert_ids_to_tokens(tok(text, add_special_tokens=False).input_ids)
        out_console.print(pieces)


if __name__ == "__main__":
    app()
