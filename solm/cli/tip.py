"""`tip`: Thinking in Place — thought registers whose reuse frees KV pages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.decode.tip.config import TipDecodeConfig
from solm.cli.setting_options import setting_option
from solm.decode.tip.system import TipEngine
from solm.decode.registry import EngineChoice
from solm.cli.checks import check_paths, engine_list
from solm.cli.console import handle_errors, info, out_console, progress
from solm.cli.flags import engine_option, gguf_type_option
from solm.cli.flags import (model_command, out_option, CompileOption, ConfigOption,
                            DebugOption, DedupeOption, DEFAULT_MODEL, DeviceOption, DtypeOption,
                            ForceOption, ModelOption, QuantizeOption, QuietOption, SplitOption,
                            VersionOption)
from solm.cli.job_helpers import (annotation_records, llm_annotation, settings_from,
                                  show_control_tokens)
from solm.cli.errors import command_group
from solm.cli.decode_command import decode_command
from solm.cli.options import llm_options, train_command
from solm.cli.tip_eval import app as tip_eval_app
from solm.core.errors import SolmError
from solm.core.paths import outputs_beside
from solm.decode.tip.policies import POLICIES, policies_help
from solm.train.grpo import TipGRPOConfig
from solm.train.tip_sft import TipSFTConfig

app = command_group(
    "tip",
    "TIP (Thinking in Place): each reasoning step opens with a register `<reg_i>`; reusing "
    "a register kills the older step and the paged runtime frees its KV pages.")

POLICY_HELP = "Eviction policy: " + policies_help() + "."


def _registers(model: str, registers: Optional[int]) -> int:
    """What the model's solm.json records (another --registers is refused), else
    --registers, else 16."""
    from solm.core.models import resolve_registers

    return resolve_registers(model, registers)


def _load(model: str, registers: int, dtype: str, device: Optional[str],
          quantize: Optional[str] = None):
    from solm.core.models import load_decoder

    info(f"loading {model} ({registers} registers) ...")
    return load_decoder(model, dtype=dtype, device=device, system="tip", quantize=quantize,
                        num_registers=registers)


@app.callback()
def main(version: bool = VersionOption) -> None:
    """Keeps the app a command group and gives it `--version`."""


app.add_typer(tip_eval_app, name="eval")


TIP_DECODE_HELP = """Decode problems with the paged runtime under an eviction policy; reports live KV
tokens, peak pages, throughput and decode time per sample and overall.

Input: JSONL with a `prompt`, `question` or `problem` field per line, e.g.
`{"id": "aime24-1", "problem": "Find ..."}`, or one problem as the argument. Output: one row
per (problem, sample), appended; a rerun resumes.

Examples:

- `tip decode -m M "What is 12 + 30?"`
- `solm data get aime2024 && tip decode -m M -p ~/.cache/solm/data/aime2024.jsonl --registers 16 --samples 16 -o runs/tip.jsonl`
"""

decode_command(app, "tip", TIP_DECODE_HELP,
               prompts_help="JSONL of problems (prompt, question or problem field); or give "
                            "one problem as the argument.")


TIP_ANNOTATE_HELP = """Annotate reasoning traces with thought registers; resumable, faithful.

Each step of a trace (a worked solution: `solution` or `answer` of MATH / DeepMath / GSM8K
rows, or any prompt/response JSONL) opens with a register `<reg_i>`; a register is reused
only when the step it holds is no longer needed by later steps, so the TIP model learns to
forget what it will not read again. Removing the registers gives back the trace exactly
(checked per row). Rows that cannot be annotated go to the rejects file with a reason;
rerunning the same command skips every id already in either file.

**Annotators** (`--annotator`):

- `rules`: steps at line breaks and sentence ends (outside maths), merged to at least
  `--min-step-tokens`; a step is needed while a later step refers back to it (shares a
  number other than 0/1, a maths symbol or a named quantity that no step in between
  restates); registers go least recently used first, to steps no longer needed when there
  are any (solm/annotate/tip_rules.py says it in full).
  `tip annotate -i ~/.cache/solm/data/deepmath.jsonl -o traces.jsonl --registers 2 --limit 1000`
- `gemini:MODEL[@URL]`, `openai:MODEL[@URL]`, `hf:MODEL`: the LLM backends of `pasta
  annotate`, with TIP's own prompt and demonstrations (solm/annotate/prompts/tip_*).
  `tip annotate -i deepmath.jsonl -o traces.jsonl --annotator gemini:gemini-2.5-flash --registers 4`

Output rows: `prompt`, `response` (the trace), `annotated` (with registers), `steps`,
`killed` (steps a reuse kills), `forced` (rules: killed while still referred to),
`registers`.
"""


@app.command("annotate", help=TIP_ANNOTATE_HELP)
@handle_errors
@llm_options
def annotate(
    input: str = typer.Option(..., "--input", "-i", help="JSONL of problems with worked "
                              "solutions or traces, `-` for standard input, or a hub "
                              "dataset name."),
    output: Path = out_option(..., flag="--output", help="Accepted rows are appended here."),
    annotator: str = typer.Option("rules", help="`rules`, `gemini:MODEL[@URL]`, "
                                  "`openai:MODEL[@URL]` or `hf:MODEL` (see above)."),
    registers: int = typer.Option(16, min=1, help="Thought registers <reg_0> ... "
                                  "<reg_{N-1}>: fewer registers, more reuse."),
    min_step_tokens: int = typer.Option(16, min=1, help="rules: sentences merge until a step "
                                        "has this many tokens."),
    rule: str = typer.Option("refers", help="rules: when a step's register may be reused. "
                             "refers: once no later step refers back to it (shared numbers, "
                             "variables, named quantities); needs: once its last reader in "
                             "the row's own `needs` has run (a generated task's rows), a dead "
                             "step's register taken before an unused one; lru: "
                             "the least recently used register, whatever still reads its "
                             "step (the simple rule a learned policy can beat)."),
    rejects: Optional[Path] = typer.Option(None, help="Rejected rows with a reason (default: "
                                           "OUTPUT with .rejects.jsonl)."),
    tokenizer: str = typer.Option(DEFAULT_MODEL, help="Tokenizer that counts step lengths."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only N rows (the first N, or a "
                                        "random N with --seed)."),
    seed: Optional[int] = typer.Option(None, help="With --limit: a seeded random subset."),
    split: str = SplitOption,
    dedupe: bool = DedupeOption,
    force: bool = ForceOption,
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
    **llm,
) -> None:
    from solm.core.models import load_tokenizer
    from solm.core.paths import outputs_beside
    from solm.core.provenance import check_rerun_settings, write_manifest

    rejects = rejects or output.with_name(output.stem + ".rejects.jsonl")
    check_paths([input], [*outputs_beside(output), rejects])
    version = None
    if annotator != "rules":
        from solm.annotate.tip_prompt import tip_prompt_version
        try:
            version = tip_prompt_version(registers)
        except ValueError as e:
            raise SolmError(f"--registers {registers}: {e}") from None
    from solm.annotate.tip_rules import RULES

    if rule not in RULES:
        raise typer.BadParameter(f"expected one of {', '.join(RULES)}", param_hint="--rule")
    if rule != "refers" and annotator != "rules":
        raise typer.BadParameter("applies to --annotator rules only", param_hint="--rule")
    row_settings = {"annotator": annotator, "tokenizer": tokenizer, "registers": registers,
                    "min_step_tokens": min_step_tokens if annotator == "rules" else None,
                    "rule": rule if annotator == "rules" else None,
                    "temperature": llm["temperature"],
                    "max_output_tokens": llm["max_output_tokens"],
                    "prompt_version": version}
    mixed = check_rerun_settings(output, row_settings, force)
    tok = load_tokenizer(tokenizer)
    count = lambda s: len(tok(s, add_special_tokens=False).input_ids)  # noqa: E731
    records = annotation_records(input, split, limit, seed, dedupe)
    if annotator == "rules":
        from solm.annotate.tip_job import annotate_tip_rules_job

        with progress("annotating", len(records)) as advance:
            summary = annotate_tip_rules_job(
                records, output, rejects, count, registers, min_step_tokens, rule=rule,
                on_row=lambda s: advance(status=f"annotated {s.annotated} reusing "
                                                f"{s.reuse_share:.0%} rejected "
                                                f"{sum(s.rejected.values())}"))
    else:
        from solm.annotate.llm_job import LLMAnnotatorSettings
        from solm.annotate.tip_prompt import tip_task

        settings = LLMAnnotatorSettings(**llm)
        summary = llm_annotation(records, annotator, output, rejects, count,
                                 settings.job_config(), settings.base_url, settings.timeout,
                                 task=tip_task(registers))
    write_manifest(output, "tip annotate", settings_from(locals()), inputs=[input],
                   model=tokenizer, extra={"summary": summary.to_dict(),
                                           "prompt_version": version},
                   row_settings=row_settings, mixed=mixed)
    out_console.print_json(json.dumps(summary.to_dict()))


TIP_SFT_HELP = """Finetune a model to think in place (TIP-SFT), or on the same traces without
registers (`--strip-registers`: the Dense baseline).

Masks, positions and targets come from solm.core's TIP `structure()`: a token does not see a
step that a reused register killed before it, exactly what the paged runtime evicts.
`--registers N` gives the tokenizer N register tokens (the traces' registers must be among
them); the model's solm.json records N, and `tip decode` / `tip eval` read it back. Prompts get
the maths instruction (final answer in \\boxed{}) unless `--no-math-prompt`. Everything else
is `pasta sft`'s: LoRA or full, bf16 where the hardware has it, checkpoints in OUT/checkpoints
(rerun the same command to resume), many GPUs through `accelerate launch` / `torchrun`.

Examples:

- CPU: `tip sft --data runs/tip/traces.jsonl --registers 2 --out runs/tip/tip-sft --lora-r 16 --lr 1e-3 --epochs 1`
- Dense baseline: the same with `--strip-registers --out runs/tip/dense-sft`
"""

train_command(app, "sft", TIP_SFT_HELP, TipSFTConfig, "solm.train.tip_sft:TipSFTTrainer",
              lambda t, c: f"{t.system}-sft of {c.model} on {c.data} ({c.registers} registers)"
                           f" -> {c.out}")


TIP_GRPO_HELP = """GRPO on a TIP model: reward = correct - c x live KV, rollouts decoded with
eviction happening (TRL's GRPOTrainer, rollouts from the paged TIP runtime).

Each step samples `--num-generations` completions for each of `--batch-size /
--num-generations` problems with the TIP runtime (a reused register frees the older step's
pages while the policy samples; rows refill as they end), scores them (1 when the last
\\boxed{} answer is right, by integer match for GSM8K / AIME and math-verify otherwise,
minus c times the live response KV over --max-completion-length), and takes a clipped
policy-gradient step whose log-probs are recomputed under the same TIP masks. Logged per
step (train_log.jsonl): reward, `correct`, `kv`, and `groups_varying`, the share of groups
whose correctness differs: without such groups the only signal is the KV term, which
teaches brevity alone.

Group size, clipping (`--epsilon`), KL (`--beta`), loss type and reward scaling are
configurable; LoRA or full, bf16, resume from OUT/checkpoints, many GPUs (`accelerate
launch`) as in `tip sft`.

Example (CPU): `tip grpo --data ~/.cache/solm/data/gsm8k_train.jsonl --model runs/tip/tip-sft --registers 2 --out runs/tip/tip-grpo --lora-r 8 --lr 1e-4 --max-steps 20 --batch-size 16 --num-generations 4 --max-completion-length 256`
"""

train_command(app, "grpo", TIP_GRPO_HELP, TipGRPOConfig, "solm.train.grpo:TipGRPOTrainer",
              lambda t, c: f"grpo of {c.model} on {c.data} (group {c.num_generations}, kv "
                           f"penalty {c.kv_penalty:g}) -> {c.out}")


@app.command()
@handle_errors
def traces(
    out: Path = out_option(..., help="JSONL of traces (prompt, response)."),
    source: Path = typer.Option(..., "--source", "-s",
                                help="JSONL with worked solutions (`solution` or `answer`), "
                                     "e.g. MATH or DeepMath rows."),
    n: int = typer.Option(16, min=1, help="How many traces."),
    min_tokens: int = typer.Option(4000, min=1, help="Each trace has at least this many tokens."),
    registers: int = typer.Option(16, min=1, help="Thought registers the rules annotator "
                                  "assigns."),
    min_step_tokens: int = typer.Option(24, min=1, help="Sentences merge until a step is this long."),
    tokenizer: str = typer.Option(DEFAULT_MODEL, help="Tokenizer that counts step lengths."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Build long register-annotated traces for `tip bench`: real solutions concatenated to
    --min-tokens, annotated by `tip annotate`'s rules (see solm/annotate/tip_traces.py).

    Input: JSONL with a question and a worked `solution` (or `answer`) per line, e.g. the
    rows of DeepMath-103K (`solm data get deepmath`). Example: `tip traces --source ~/.cache/solm/data/deepmath.jsonl -o runs/tip/traces.jsonl --n 16 --min-tokens 4000`
    """
    from solm.core.vocabulary import add_control_tokens
    from solm.core.jsonl import write_jsonl
    from solm.core.models import load_tokenizer
    from solm.core.records import load_records
    from solm.annotate.tip_traces import build_traces
    from solm.core.provenance import write_manifest

    check_paths([source], outputs_beside(out))
    tok = load_tokenizer(tokenizer)
    add_control_tokens(None, tok, "tip", num_registers=registers)
    count = lambda s: len(tok(s, add_special_tokens=False).input_ids)  # noqa: E731
    solutions = ((r.prompt, r.response) for r in load_records(str(source)) if r.response)
    rows = build_traces(solutions, count, n, min_tokens, registers, min_step_tokens)
    if not rows:
        raise SolmError(f"{source}: no row has a worked solution (`solution`, `answer` or "
                        f"`response`); nothing written")
    write_jsonl(out, rows)
    write_manifest(out, "tip traces", settings_from(locals()), inputs=[source],
                   model=tokenizer, extra={"traces": len(rows)})
    info(f"{len(rows)} traces, {min(count(r['response']) for r in rows)}+ tokens each -> {out}")


@app.command()
@model_command
def bench(
    traces_file: Path = typer.Option(..., "--traces", "-t", help="From `tip traces` (or any "
                                     "JSONL with prompt + register-annotated response)."),
    model: str = ModelOption,
    policies: str = typer.Option("all", help="Comma-separated, side by side in one run, or "
                                 "`all` (every registered policy). " + policies_help() + "."),
    registers: Optional[int] = setting_option(TipEngine, "registers"),
    budget: int = setting_option(TipDecodeConfig, "budget", 1024,
                                 why="half a 2K-token trace, so budgeted policies evict"),
    page_size: int = setting_option(TipEngine, "page_size"),
    batch_size: int = typer.Option(16, min=1, help="Traces replayed together (refilled as "
                                   "they end)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N traces."),
    max_tokens: Optional[int] = typer.Option(None, min=1, help="Cut each trace to N response tokens."),
    dtype: str = DtypeOption,
    device: Optional[str] = DeviceOption,
    out: Optional[Path] = out_option(None, help="Summary JSON here."),
    compile: Optional[bool] = CompileOption,
    quantize: Optional[str] = QuantizeOption,
    engine: Optional[str] = engine_option(also="A comma-separated list (`torch,llama.cpp`) "
                                               "replays every policy on each engine, side by "
                                               "side in one run, with llama.cpp's throughput "
                                               "over torch's per policy; with `--policies "
                                               "all`, llama.cpp leaves out the policies it "
                                               "cannot run (h2o) and says why.",
                                          callback=engine_list),
    gguf_type: str = gguf_type_option(),
    onnx_type: str = setting_option(EngineChoice, "onnx_type"),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Replay traces token by token with each policy, side by side in one run: throughput,
    live KV tokens, peak pages, fragmentation, and the ratios against dense (per engine).

    Input: JSONL with `prompt` and a register-annotated `response`, e.g.
    `{"prompt": "Solve ...", "response": "<reg_0>First, ...\\n<reg_1>Then ..."}` (`tip traces`
    writes such files).

    Examples:

    - `tip bench -t runs/tip/traces.jsonl --max-tokens 4000 --policies dense,tip -o runs/tip/bench.json`
    - `tip bench -t runs/tip/traces.jsonl --max-tokens 2000 --policies dense,tip,streamingllm --engine torch,llama.cpp -o runs/tip/engines.json`
    """
    from solm.core.chat import prompt_ids, text_ids
    from solm.core.provenance import write_manifest
    from solm.engines.torch.compiled import should_compile
    from solm.eval.tip_bench import (bench_kv, bench_runtime, merge_engines, plan_engines,
                                     read_trace_rows, run_tip_bench)
    from solm.engines import applies, get_engine, load_on_engine

    from solm.decode.tip.policies import make_policy

    registers = _registers(model, registers)
    named = policies.strip() != "all"
    names = (list(POLICIES) if not named
             else [p.strip() for p in policies.split(",") if p.strip()])
    for name in names:  # fail on bad flags before loading the model
        make_policy(name, budget, page_size)
    plot = None if out is None else out.with_suffix(".png")
    check_paths([traces_file], [*outputs_beside(out), plot])
    rows = read_trace_rows(traces_file, limit)  # the input first: then the engines chosen
    plans = plan_engines(engine, names, budget, page_size, named, registers=registers,
                         gguf_type=gguf_type, onnx_type=onnx_type, quantize=quantize,
                         compile=compile)
    done: list[dict] = []

    def policy_done(row: dict) -> None:
        info(f"{row['policy']} ({row['engine']}): {row['throughput_tok_s']:.1f} tok/s, live "
             f"{row['mean_live_tokens']:.0f} tokens")
        done.append(row)
        if out:  # what finished is kept if a later policy is interrupted
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"partial": True, "policies": done}, indent=2))

    summaries, pairs = [], None
    for settings, runs, refused in plans:
        for name, why in refused.items():
            info(f"{name} left out on {settings.engine}: {why}")
        info(f"loading {model} ({registers} registers) for {settings.engine} ...")
        m, tok = load_on_engine(model, settings, dtype, device, "tip", registers)
        if pairs is None:  # every engine's tokenizer has the same tokens
            # `tip annotate` keeps the plain solution as `response` and the registers in
            # `annotated`: a replay without registers would evict nothing
            pairs = [(prompt_ids(tok, r["prompt"]),
                      text_ids(tok, r.get("annotated") or r["response"])[:max_tokens])
                     for r in rows]
        compiled = get_engine(settings.engine).torch_step and should_compile(
            compile, sum(len(r) for _, r in pairs) * len(runs), m.device)
        rt = bench_runtime(m, tok, pairs, settings, batch_size, compiled)
        info(f"replaying {len(pairs)} traces (mean "
             f"{sum(len(r) for _, r in pairs) / len(pairs):.0f} tokens) with {', '.join(runs)}"
             f" on {settings.engine}")
        with progress(f"replaying on {settings.engine} (tokens)",
                      sum(len(r) for _, r in pairs) * len(runs)) as advance:
            renew = None if rt.engine_kv is None else \
                (lambda: bench_kv(pairs, settings, batch_size))
            summary = run_tip_bench(rt, pairs, runs, budget, batch_size, settings.engine,
                                    on_policy=policy_done, on_step=advance, fresh_kv=renew)
        summary.update({"compiled": compiled, "compile_s": round(rt.compile_s, 1),
                        "dtype": str(m.dtype).replace("torch.", "")
                        if applies(settings.engine, "dtype") else None,
                        "refused": refused,
                        "gguf_type": gguf_type if applies(settings.engine, "gguf_type")
                        else None,
                        "onnx_type": onnx_type if applies(settings.engine, "onnx_type")
                        else None})
        summaries.append(summary)
        del rt, m  # one model in memory at a time
    summary = merge_engines(summaries)
    summary.update({"model": model, "quantize": quantize})
    if out:
        from solm.eval.tip_plots import plot_tip_bench

        out.write_text(json.dumps(summary, indent=2))
        plot_tip_bench(summary, plot)
        write_manifest(out, "tip bench", settings_from(locals()), inputs=[traces_file],
                       model=model, extra={})
    out_console.print_json(json.dumps(summary))


@app.command()
@model_command
def tokens(
    model: str = ModelOption,
    registers: int = typer.Option(16, min=1, help="Number of thought registers."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    """Show the register tokens and their ids in a model's tokenizer."""
    from solm.core.control_tokens import tip_tokens

    show_control_tokens(model, "tip", tip_tokens(registers), num_registers=registers)


if __name__ == "__main__":
    app()
