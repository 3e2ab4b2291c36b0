"""The prompt a model was trained with is the prompt every command gives it: recorded in its
solm.json, attached to its tokenizer at load, appended once by `prompt_ids`."""

from __future__ import annotations

import json

import pytest

from solm.core.chat import prompt_ids
from solm.core.models import ARTIFACTS, artifact_state, load_tokenizer
from solm.core.prompt_format import attach, recorded_instruction, with_instruction

INSTRUCTION = "Answer in one word."


def test_the_instruction_is_appended_once(tip_tok):
    attach(tip_tok, INSTRUCTION)
    try:
        once = prompt_ids(tip_tok, "What is red?")
        assert prompt_ids(tip_tok, "What is red?\n\n" + INSTRUCTION) == once
        attach(tip_tok, None)
        assert prompt_ids(tip_tok, f"What is red?\n\n{INSTRUCTION}") == once
        assert prompt_ids(tip_tok, "What is red?") != once
    finally:
        attach(tip_tok, None)


def test_with_instruction_keeps_a_prompt_that_already_ends_with_it():
    assert with_instruction("Q", None) == "Q"
    assert with_instruction("Q ", INSTRUCTION) == f"Q\n\n{INSTRUCTION}"
    assert with_instruction(f"Q\n\n{INSTRUCTION}\n", INSTRUCTION) == f"Q\n\n{INSTRUCTION}\n"


@pytest.mark.parametrize("meta,expected", [
    ({"prompt_instruction": INSTRUCTION}, INSTRUCTION),
    ({"prompt_instruction": None, "control_tokens": "tip", "settings": {"math_prompt": True}},
     None),  # the field wins over the settings it was derived from
    ({"control_tokens": "tip", "settings": {"math_prompt": True}}, "MATH"),
    ({"control_tokens": "tip", "settings": {"math_prompt": False}}, None),
    ({"control_tokens": "pasta", "settings": {}}, None),
])
def test_the_recorded_instruction(meta, expected):
    from solm.core.math_task import INSTRUCTION as MATH

    assert recorded_instruction(meta) == (MATH if expected == "MATH" else expected)


def _training_prompt(name: str, problem: str, tmp_path) -> list[int]:
    """The ids the training stage that made kept model `name` fed for `problem`, built the
    way that stage builds them: its own row reader on a one-row file, with the settings the
    model records, through its parent's tokenizer."""
    from solm.core.models import artifact_folder

    meta = json.loads((__import__("pathlib").Path(artifact_folder(name)) / "solm.json")
                      .read_text())
    settings = meta["settings"]
    parent = load_tokenizer(meta["parent_model"])
    if meta["control_tokens"] == "tip":
        from solm.train.tip_sft import load_tip_rows

        rows = tmp_path / "rows.jsonl"
        rows.write_text(json.dumps({"prompt": problem, "annotated": "<reg_0> x"}) + "\n")
        row = load_tip_rows(str(rows), meta.get("num_registers", 16), False,
                            settings.get("math_prompt", True))[0]
        return prompt_ids(parent, row["prompt"], row.get("system"))
    return prompt_ids(parent, problem)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ARTIFACTS))
def test_a_decode_gives_every_kept_model_its_training_prompt(name, tmp_path):
    if artifact_state(name).startswith("not built"):
        pytest.skip(f"{name} is not built here")
    problem = "Track a = 3. Step 1: a += 4. What is a?"
    decoded = prompt_ids(load_tokenizer(name), problem)
    assert decoded == _training_prompt(name, problem, tmp_path)


def test_a_trained_tip_model_records_its_instruction_and_decodes_with_it(tmp_path,
                                                                         tiny_folder):
    """`tip sft` records the maths instruction; loading the result gives it back on its
    tokenizer; `--no-math-prompt` records none."""
    from solm.core.math_task import INSTRUCTION as MATH
    from solm.core.models import load_model
    from solm.train.tip_sft import TipSFTConfig, TipSFTTrainer

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"Q{i}?",
                                        "annotated": f"<reg_0> a{i}. <reg_1> b."}) + "\n"
                            for i in range(4)))
    for math, expected in ((True, MATH), (False, None)):
        out = tmp_path / f"m{math}"
        TipSFTTrainer(TipSFTConfig(out=str(out), data=str(rows), model=tiny_folder,
                                   registers=2, math_prompt=math, max_steps=1, batch_size=2,
                                   micro_batch_size=2, eval_rows=0, quiet=True,
                                   precision="fp32")).train()
        assert json.loads((out / "solm.json").read_text())["prompt_instruction"] == expected
        _, tok = load_model(str(out), dtype="fp32", device="cpu")
        assert getattr(tok, "solm_instruction") == expected
