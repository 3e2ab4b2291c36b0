"""`solm check-engines`: do torch and another engine decode the same greedy answers, and where
they part, is it a near-tie of the reference or a bug?"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from solm.cli.flags import (ConfigOption, DebugOption, ModelOption, QuietOption, model_command,
                            out_option)
from solm.cli.setting_options import setting_option
from solm.decode.pasta.config import PastaDecodeConfig

CHECK_ENGINES_HELP = """Decode prompts greedily on the torch engine (fp32, the reference) and on
another engine (--engine: llama.cpp, onnxruntime), and report per prompt the first position where the answers differ and the
reference's top-1 minus top-2 logit gap there (from the Hugging Face model's own forward
pass). Only the logits decide a token (no repetition penalty, no n-gram ban).

Verdicts: `equal`; `near-tie` (the gap at the divergence is at most --tolerance: two correct
engines may part there); `beyond tolerance` (the reference preferred its token clearly, so
the engines compute different logits: a bug, or the rounding of a quantized export).
`max_logit_diff` is the largest |engine - reference| logit over each common prefix.

The check is exact in each engine's fp32 format (the defaults: llama.cpp's `--gguf-type f32`,
an f32 export with an F32 KV cache; onnxruntime's `--onnx-type fp32`); quantized formats'
rounding alone parts the engines at gaps of 0.01-0.2. Exits with status 1 when a divergence
is beyond tolerance.

Example: `solm check-engines -m smollm2-135m --limit 16 --max-new-tokens 64 -o runs/engines.jsonl`
"""


@model_command
def check_engines_command(
    model: str = ModelOption,
    prompts: Optional[Path] = typer.Option(None, "--prompts", "-p", help="JSONL of prompts "
                                           "(default: the PASTA demo prompts)."),
    limit: int = typer.Option(16, min=1, help="Only the first N prompts."),
    max_new_tokens: int = setting_option(PastaDecodeConfig, "max_new_tokens", 64,
                                         why="enough tokens to find where two engines first differ"),
    engine: str = typer.Option("llama.cpp", "--engine", help="The engine checked against "
                               "the reference (torch): any other registered engine."),
    gguf_type: str = typer.Option("f32", "--gguf-type", help="The export llama.cpp decodes "
                                  "(f32: the check that must hold to --tolerance)."),
    onnx_type: str = typer.Option("fp32", "--onnx-type", help="The graph onnxruntime runs "
                                  "(fp32: the check that must hold to --tolerance)."),
    tolerance: float = typer.Option(1e-3, min=0.0, help="The largest reference gap a "
                                    "divergence may have and still be a near-tie."),
    out: Optional[Path] = out_option(None, help="Per-prompt rows (JSONL); the summary goes "
                                     "to its manifest."),
    config: Optional[Path] = ConfigOption, quiet: bool = QuietOption, debug: bool = DebugOption,
) -> None:
    from solm.cli.checks import check_paths
    from solm.cli.console import info, out_console, progress
    from solm.cli.job_helpers import settings_from
    from solm.core.chat import prompt_ids
    from solm.core.errors import SolmError
    from solm.core.jsonl import JsonlWriter
    from solm.core.paths import outputs_beside
    from solm.core.provenance import write_manifest
    from solm.core.records import load_records
    from solm.decode.pasta.decode_file import DEMO_PROMPTS
    from solm.engines import ENGINES, REFERENCE
    from solm.engines.llamacpp.export import OUTTYPES
    from solm.engines.onnxruntime.graph import FORMATS

    for name, value, allowed in (("--engine", engine, [e for e in ENGINES if e != REFERENCE]),
                                 ("--gguf-type", gguf_type, OUTTYPES),
                                 ("--onnx-type", onnx_type, FORMATS)):
        if value not in allowed:
            raise typer.BadParameter(f"must be one of {', '.join(allowed)}", param_hint=name)
    source = prompts or DEMO_PROMPTS
    check_paths([source], outputs_beside(out) if out else [])
    records = list(load_records(str(source), limit=limit))
    if not records:
        raise SolmError(f"{source}: no prompts")
    from solm.decode.pasta.system import PastaEngine, load, one_request_runtime
    from solm.eval.engine_check import compare_answers, greedy_config, summarize
    from solm.engines import choose, get_engine

    reference = PastaEngine(engine=REFERENCE, pool_size=4096)
    other = PastaEngine(engine=engine, gguf_type=gguf_type, onnx_type=onnx_type,
                        pool_size=4096)
    choose(engine, "pasta", settings=reference)  # installed, or a one-line error
    info(f"loading {model} (fp32) ...")
    m, tok = load(model, reference, "fp32", "cpu")
    get_engine(engine).load(model, other, "fp32", "cpu", "pasta")  # its export, its notice
    described = get_engine(engine).describe(other, "fp32")
    info(f"{described} against {get_engine(REFERENCE).describe(reference, 'fp32')}")
    torch_rt = one_request_runtime(m, tok, reference)
    other_rt = one_request_runtime(m, tok, other)
    cfg = greedy_config(max_new_tokens)
    rows = []
    writer = None
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        writer = JsonlWriter(out)
    with progress("comparing engines", len(records)) as advance:
        for rec in records:
            ids = prompt_ids(tok, rec.prompt)
            a = torch_rt.generate(ids, cfg)
            b = other_rt.generate(ids, cfg)
            row = compare_answers(rec.id, m, ids, a.ids, b.ids, b.logits, tok.eos_token_id,
                                  tolerance)
            rows.append(row)
            if writer:
                writer.write(row.to_dict())
            advance(status=f"{rec.id}: {row.verdict}")
    fmt = get_engine(engine).format_setting
    summary = {"model": model, "engine": engine, fmt: getattr(other, fmt),
               "max_new_tokens": max_new_tokens, **summarize(rows, tolerance)}
    if writer:
        writer.close()
        write_manifest(out, "solm check-engines", settings_from(locals()), inputs=[source],
                       model=model, extra={"summary": summary})
    for r in rows:
        where = ("same answer" if r.first_divergence is None else
                 f"first differs at token {r.first_divergence}, reference gap "
                 f"{r.reference_gap if r.reference_gap is None else round(r.reference_gap, 5)}"
                 f" ({r.verdict})")
        info(f"{r.id}: {where}; max logit diff {r.max_logit_diff:.2e}")
    out_console.print_json(json.dumps(summary))
    if not summary["holds"]:
        raise typer.Exit(1)
