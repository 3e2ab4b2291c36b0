"""The data sets solm's commands and Makefile targets read, and how each becomes solm JSONL.

One `DataSet` per set: where it lives on the Hugging Face hub (repository, the raw files,
a pinned revision) and how one of its rows becomes one row of solm's JSONL (the fields the
commands already read: ShareGPT `conversations`, Alpaca `instruction`/`output`,
`question`/`problem` with `solution`/`answer`). Raw files are fetched with
`huggingface_hub`, never through a `datasets` loading script (`datasets` 5.x no longer runs
them, and AlpacaEval is one).

Revisions are the hub's commit of `main` when they were checked (public dataset cards and
pinned uses); AlpacaEval's could not be looked up from here and stays `main`: its
SOURCE.json then records the commit actually downloaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

Row = dict[str, Any]


class MissingField(ValueError):
    def __init__(self, name: str):
        self.field = name
        super().__init__(f"missing or empty field '{name}'")


def need(row: Row, *names: str) -> Any:
    """The first of `names` the row has (a hub name, or a name a local copy uses)."""
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            return value
    raise MissingField(names[0])


@dataclass(frozen=True)
class DataSet:
    name: str
    description: str
    repo: str
    files: tuple[str, ...]  # raw files in the hub repository, read in order
    revision: str
    convert: Callable[[Row, int], Row]
    rows: int  # rows of the full set (what `solm data list` shows)
    download_mb: float  # size of the raw files
    license: str
    note: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)

    @property
    def filename(self) -> str:
        return f"{self.name}.jsonl"


# ---- converters: one hub row (or a row of a local copy) -> one solm row -----------------

def alpaca_row(prefix: str) -> Callable[[Row, int], Row]:
    def convert(row: Row, i: int) -> Row:
        return {"id": f"{prefix}-{i}", "instruction": need(row, "instruction"),
                "dataset": row.get("dataset"), "output": need(row, "output"),
                "generator": row.get("generator")}

    return convert


def sharegpt_row(prefix: str) -> Callable[[Row, int], Row]:
    def convert(row: Row, i: int) -> Row:
        turns = need(row, "conversations")
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise MissingField("conversations")
        return {"id": f"{prefix}-{i}", "conversations": [
            {"from": t.get("from"), "value": t.get("value")} for t in turns]}

    return convert


def dolly_row(row: Row, i: int) -> Row:
    instruction, response = need(row, "instruction"), need(row, "response")
    context = row.get("context") or ""
    human = f"{instruction}\n\n{context}" if context else instruction
    return {"id": f"dolly-{i}", "conversations": [{"from": "human", "value": human},
                                                  {"from": "gpt", "value": response}],
            "instruction": instruction, "context": context, "response": response,
            "category": row.get("category")}


def deepmath_row(row: Row, i: int) -> Row:
    return {"id": f"deepmath-{i}", "question": need(row, "question"),
            "final_answer": str(need(row, "final_answer")),
            "difficulty": row.get("difficulty"), "topic": row.get("topic"),
            # the first of DeepSeek-R1's three solutions (a local copy may call it solution)
            "solution": need(row, "r1_solution_1", "solution")}


def math500_row(row: Row, i: int) -> Row:
    uid = need(row, "unique_id")
    return {"id": uid, "unique_id": uid, "problem": need(row, "problem"),
            "solution": need(row, "solution"), "answer": str(need(row, "answer")),
            "subject": row.get("subject"), "level": row.get("level")}


def gsm8k_final(answer: str) -> str:
    """GSM8K's gold number: the text after `####`, thousands separators removed."""
    if "####" not in answer:
        raise MissingField("answer")
    return answer.split("####")[-1].strip().replace(",", "")


def gsm8k_row(split: str) -> Callable[[Row, int], Row]:
    def convert(row: Row, i: int) -> Row:
        answer = need(row, "answer")
        return {"id": f"gsm8k-{split}-{i}", "question": need(row, "question"),
                "answer": answer, "final_answer": gsm8k_final(answer)}

    return convert


def aime_row(year: int) -> Callable[[Row, int], Row]:
    def convert(row: Row, i: int) -> Row:
        answer = str(need(row, "answer")).strip()
        if not re.fullmatch(r"\d{1,3}", answer):
            raise MissingField("answer")  # AIME answers are integers 0-999
        rid = row.get("id")
        rid = i if rid in (None, "") else rid
        out = {"id": str(rid) if str(rid).startswith(str(year)) else f"aime{year}-{rid}",
               "problem": need(row, "problem", "question"), "answer": int(answer)}
        if row.get("solution"):
            out["solution"] = row["solution"]
        if row.get("url"):
            out["url"] = row["url"]
        return out

    return convert


DEEPMATH_SHARDS = tuple(f"data/train-{i:05d}-of-00010.parquet" for i in range(10))

SETS: dict[str, DataSet] = {s.name: s for s in (
    DataSet("alpaca_eval", "AlpacaEval's 805 instructions with the text-davinci-003 reference "
            "outputs (AlpacaEval 1)", "tatsu-lab/alpaca_eval", ("alpaca_eval.json",), "main",
            alpaca_row("alpaca_eval"), 805, 0.6, "CC BY-NC 4.0"),
    DataSet("alpaca_eval_gpt4", "AlpacaEval 2's reference: GPT-4-1106-preview's outputs for "
            "the 805 instructions", "tatsu-lab/alpaca_eval",
            ("alpaca_eval_gpt4_baseline.json",), "main", alpaca_row("alpaca_eval_gpt4"), 805,
            1.9, "CC BY-NC 4.0"),
    DataSet("slimorca", "SlimOrca: 518k GPT-4 ShareGPT conversations (the PASTA thesis' "
            "instruction set)", "Open-Orca/SlimOrca", ("oo-labeled_correct.gpt4.sharegpt.jsonl",),
            "ce9ed009ef3292bac33d3520afaf5ec804066120", sharegpt_row("slimorca"), 517_982, 985,
            "MIT"),
    DataSet("dolly", "databricks-dolly-15k: human-written instructions and responses",
            "databricks/databricks-dolly-15k", ("databricks-dolly-15k.jsonl",),
            "bdd27f4d94b9c1f951818a7da7fd7aeea5dbff1a", dolly_row, 15_011, 13, "CC BY-SA 3.0"),
    DataSet("deepmath", "DeepMath-103K: maths problems with DeepSeek-R1 solutions (TIP's "
            "training traces)", "zwhe99/DeepMath-103K", DEEPMATH_SHARDS,
            "5cf055d1fe3d7a2eb19719ac020211469736ae44", deepmath_row, 103_022, 2136, "MIT"),
    DataSet("math500", "MATH-500: the 500 MATH test problems of PRM800K's split",
            "HuggingFaceH4/MATH-500", ("test.jsonl",),
            "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be", math500_row, 500, 0.4, "MIT"),
    DataSet("gsm8k_train", "GSM8K training problems with worked answers (`#### N`)",
            "openai/gsm8k", ("main/train-00000-of-00001.parquet",),
            "740312add88f781978c0658806c59bc2815b9866", gsm8k_row("train"), 7_473, 2.3, "MIT",
            aliases=("gsm8k",)),
    DataSet("gsm8k_test", "GSM8K test problems with worked answers (`#### N`)",
            "openai/gsm8k", ("main/test-00000-of-00001.parquet",),
            "740312add88f781978c0658806c59bc2815b9866", gsm8k_row("test"), 1_319, 0.4, "MIT",
            aliases=("gsm8k",)),
    DataSet("aime2024", "AIME 2024, 30 problems with integer answers",
            "HuggingFaceH4/aime_2024", ("data/train-00000-of-00001.parquet",),
            "2fe88a2f1091d5048c0f36abc874fb997b3dd99a", aime_row(2024), 30, 0.1, "MIT",
            aliases=("aime",)),
    DataSet("aime2025", "AIME 2025 (I and II), 30 problems with integer answers",
            "math-ai/aime25", ("test.jsonl",), "563bb8404243c5f09de6ec262f2db674fe5bce9b",
            aime_row(2025), 30, 0.02, "Apache-2.0", aliases=("aime",),
            note="of the hub's copies: one plain test.jsonl of problem/answer/id, an explicit "
                 "licence, and all 30 problems in one split (opencompass/AIME2025 splits I and "
                 "II into two configs; MathArena's is CC BY-NC-SA)"),
)}


def resolve_names(names: list[str]) -> list[DataSet]:
    """Sets by name or alias (`gsm8k` = both splits, `aime` = both years), in order."""
    from solm.core.errors import SolmError

    out: list[DataSet] = []
    for name in names:
        found = [SETS[name]] if name in SETS else [s for s in SETS.values() if name in s.aliases]
        if not found:
            known = sorted(set(SETS) | {a for s in SETS.values() for a in s.aliases})
            raise SolmError(f"unknown data set '{name}': choose from {', '.join(known)}")
        out += [s for s in found if s not in out]
    return out
