"""`solm data`: every set converted from a stubbed hub (small files in the hub's own formats,
written here: JSON lists, JSONL, Parquet), the recorded source and revision, the offline
error, `--from` local copies, located errors, and Makefile targets that read no ../shared."""

import json
import re
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from solm.cli import main as solm_main
from solm.core.errors import DataError, SolmError
from solm.core.records import load_records
from solm.data.get import get_set, listing
from solm.data.sets import SETS, resolve_names

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ROOT = Path(__file__).resolve().parents[1]

# one or two rows per set, in the hub's fields (extra fields included, as the hub has them)
HUB_ROWS = {
    ("tatsu-lab/alpaca_eval", "alpaca_eval.json"): [
        {"instruction": "Name a fruit.", "output": "Apple.", "generator": "text_davinci_003",
         "dataset": "helpful_base"},
        {"instruction": "Say hi.", "output": "Hi!", "generator": "text_davinci_003",
         "dataset": "oasst"}],
    ("tatsu-lab/alpaca_eval", "alpaca_eval_gpt4_baseline.json"): [
        {"instruction": "Name a fruit.", "output": "A pear.", "generator": "gpt4_1106_preview",
         "dataset": "helpful_base"}],
    ("Open-Orca/SlimOrca", "oo-labeled_correct.gpt4.sharegpt.jsonl"): [
        {"conversations": [{"from": "system", "value": "Be brief.", "weight": None},
                           {"from": "human", "value": "2+2?", "weight": 0.0},
                           {"from": "gpt", "value": "4", "weight": 1.0}]}],
    ("databricks/databricks-dolly-15k", "databricks-dolly-15k.jsonl"): [
        {"instruction": "Who wrote Hamlet?", "context": "", "response": "Shakespeare.",
         "category": "open_qa"},
        {"instruction": "Summarise.", "context": "Cats sleep a lot.", "response": "Cats nap.",
         "category": "summarization"}],
    ("HuggingFaceH4/MATH-500", "test.jsonl"): [
        {"problem": "What is $1+1$?", "solution": "It is $\\boxed{2}$.", "answer": "2",
         "subject": "Algebra", "level": 1, "unique_id": "test/algebra/1.json"}],
    ("math-ai/aime25", "test.jsonl"): [
        {"problem": "Find the sum of all integer bases $b>9$ ...", "answer": "70", "id": "0"}],
}
PARQUET_ROWS = {
    ("openai/gsm8k", "main/train-00000-of-00001.parquet"): [
        {"question": "Tom has 3 apples and buys 1,200 more.", "answer": "3+1200=1203\n#### 1,203"}],
    ("openai/gsm8k", "main/test-00000-of-00001.parquet"): [
        {"question": "2 cats and 2 dogs?", "answer": "2+2=4\n#### 4"}],
    ("HuggingFaceH4/aime_2024", "data/train-00000-of-00001.parquet"): [
        {"id": 60, "problem": "Every morning Aya walks ...", "solution": "... 204",
         "answer": "204", "url": "https://aops/x", "year": "2024"}],
    **{("zwhe99/DeepMath-103K", f"data/train-{i:05d}-of-00010.parquet"): [
        {"question": f"Compute {i}+1.", "final_answer": str(i + 1), "difficulty": 2.5,
         "topic": "Arithmetic", "r1_solution_1": f"{i}+1={i + 1}", "r1_solution_2": "x",
         "r1_solution_3": "y"}] for i in range(10)},
}


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    """A stand-in for huggingface_hub.hf_hub_download over files in the hub's formats, laid
    out as the hub's cache lays them (snapshots/<commit>/<file>); counts requests."""
    import huggingface_hub

    root = tmp_path / "hub"
    calls = []
    for (repo, name), rows in {**HUB_ROWS, **PARQUET_ROWS}.items():
        path = root / repo.replace("/", "--") / "snapshots" / COMMIT / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".parquet"):
            pq.write_table(pa.Table.from_pylist(rows), path)
        elif name.endswith(".json"):
            path.write_text(json.dumps(rows))
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def download(repo_id, filename, repo_type=None, revision=None):
        assert repo_type == "dataset"
        calls.append((repo_id, filename, revision))
        path = root / repo_id.replace("/", "--") / "snapshots" / COMMIT / filename
        if not path.exists():
            raise FileNotFoundError(filename)
        return str(path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr("solm.data.get.hub_unreachable", lambda: None)
    return calls


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("name", list(SETS))
def test_every_set_converts_from_the_hub_and_records_its_source(tmp_path, hub, name):
    ds = SETS[name]
    built = get_set(ds, tmp_path / "data")
    rows = rows_of(built.path)
    hub_rows = [r for (repo, f), rs in {**HUB_ROWS, **PARQUET_ROWS}.items()
                if repo == ds.repo and f in ds.files for r in rs]
    assert built.rows == len(rows) == len(hub_rows)
    assert {(repo, f, rev) for repo, f, rev in hub} == {(ds.repo, f, ds.revision)
                                                         for f in ds.files}
    source = json.loads((tmp_path / "data" / "SOURCE.json").read_text())[name]
    assert source["repo"] == ds.repo and source["revision"] == ds.revision
    assert source["resolved_commit"] == COMMIT and source["rows"] == len(rows)
    assert [f["name"] for f in source["files"]] == list(ds.files)
    assert all(re.fullmatch(r"[0-9a-f]{64}", f["sha256"]) for f in source["files"])
    assert len({r["id"] for r in rows}) == len(rows)
    # the commands read what was written
    records = list(load_records(built.path))
    assert len(records) == len(rows) and all(r.prompt.strip() for r in records)


def test_the_conversions_keep_what_the_commands_read(tmp_path, hub):
    folder = tmp_path / "data"
    for ds in resolve_names(["alpaca_eval", "dolly", "slimorca", "gsm8k", "aime", "deepmath",
                             "math500"]):
        get_set(ds, folder)
    alpaca = list(load_records(folder / "alpaca_eval.jsonl"))
    assert (alpaca[0].prompt, alpaca[0].response) == ("Name a fruit.", "Apple.")
    dolly = list(load_records(folder / "dolly.jsonl"))
    assert dolly[1].prompt == "Summarise.\n\nCats sleep a lot." and dolly[1].response == "Cats nap."
    orca = list(load_records(folder / "slimorca.jsonl"))
    assert (orca[0].system, orca[0].prompt, orca[0].response) == ("Be brief.", "2+2?", "4")
    assert "weight" not in (folder / "slimorca.jsonl").read_text()
    gsm = rows_of(folder / "gsm8k_train.jsonl")
    assert gsm[0]["final_answer"] == "1203"
    assert rows_of(folder / "aime2024.jsonl")[0] == {
        "id": "aime2024-60", "problem": "Every morning Aya walks ...", "answer": 204,
        "solution": "... 204", "url": "https://aops/x"}
    assert rows_of(folder / "aime2025.jsonl")[0]["answer"] == 70
    deep = rows_of(folder / "deepmath.jsonl")
    assert len(deep) == 10 and deep[3]["solution"] == "3+1=4" and deep[3]["final_answer"] == "4"
    math = list(load_records(folder / "math500.jsonl"))
    assert math[0].prompt == "What is $1+1$?" and "boxed" in math[0].response


def test_offline_the_error_says_so_and_names_from(tmp_path, monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    monkeypatch.setattr("solm.data.get.hub_unreachable", lambda: None)
    with pytest.raises(SolmError, match="--from FILE") as e:
        get_set(SETS["math500"], tmp_path)
    assert "HuggingFaceH4/MATH-500" in str(e.value)
    assert not (tmp_path / "math500.jsonl").exists() and not (tmp_path / "SOURCE.json").exists()


def test_an_unreachable_hub_is_said_at_once_without_the_clients_retries(tmp_path, monkeypatch):
    """23 s of retries, then a message cut mid-word. A host that does not resolve is
    said before the hub client is called at all."""
    import socket

    import huggingface_hub

    def no_dns(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    def never(*args, **kwargs):
        raise AssertionError("the hub client was called")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "create_connection", no_dns)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", never)
    with pytest.raises(SolmError) as e:
        get_set(SETS["math500"], tmp_path)
    assert "cannot be resolved here (Name or service not known)" in str(e.value)
    assert str(e.value).endswith("solm data get math500 --from FILE")


def test_library_messages_are_cut_at_a_sentence_or_a_word():
    from solm.data.get import first_sentence

    hub_text = ("An error happened while trying to locate the file on the Hub and we cannot "
                "find the requested files in the local cache. Please check your connection "
                "and try again or make sure your Internet connection is on.")
    assert first_sentence(hub_text) == hub_text.split(". ")[0] + "."
    long = "word " * 100
    cut = first_sentence(long, limit=42)
    assert cut.endswith(" ...") and all(w == "word" for w in cut[:-4].split())


@pytest.mark.parametrize("fmt", ["hub file", "jsonl of hub rows with extra fields"])
def test_from_converts_a_local_copy(tmp_path, fmt):
    ds = SETS["gsm8k_test"]
    if fmt == "hub file":
        local = tmp_path / "test-00000-of-00001.parquet"
        pq.write_table(pa.Table.from_pylist(
            PARQUET_ROWS[("openai/gsm8k", "main/test-00000-of-00001.parquet")]), local)
    else:
        local = tmp_path / "gsm8k_copy.jsonl"
        local.write_text(json.dumps({"id": "mine-7", "question": "2 cats and 2 dogs?",
                                     "answer": "2+2=4\n#### 4", "final_answer": "ignored",
                                     "extra": [1, 2]}) + "\n")
    built = get_set(ds, tmp_path / "data", local=[local])
    assert rows_of(built.path) == [{"id": "gsm8k-test-0", "question": "2 cats and 2 dogs?",
                                    "answer": "2+2=4\n#### 4", "final_answer": "4"}]
    source = json.loads((tmp_path / "data" / "SOURCE.json").read_text())["gsm8k_test"]
    assert source["from"] == [str(local.resolve())] and "repo" not in source


def test_a_bad_row_is_named_by_file_line_and_field(tmp_path):
    local = tmp_path / "aime.jsonl"
    local.write_text(json.dumps({"problem": "p", "answer": "12"}) + "\n"
                     + json.dumps({"problem": "q", "answer": "twelve"}) + "\n")
    with pytest.raises(DataError) as e:
        get_set(SETS["aime2025"], tmp_path / "data", local=[local])
    assert f"{local}:2" in str(e.value) and "'answer'" in str(e.value)
    assert not (tmp_path / "data" / "aime2025.jsonl").exists()  # nothing half-written
    assert not list((tmp_path / "data").glob("*.tmp"))


def test_a_set_on_disk_is_kept_unless_forced_and_limit_keeps_the_first_rows(tmp_path, hub):
    folder = tmp_path / "data"
    first = get_set(SETS["dolly"], folder, limit=1)
    assert first.rows == 1 and rows_of(first.path)[0]["instruction"] == "Who wrote Hamlet?"
    again = get_set(SETS["dolly"], folder)
    assert again.skipped and again.rows == 1 and len(hub) == 1
    forced = get_set(SETS["dolly"], folder, force=True)
    assert forced.rows == 2 and len(hub) == 2


def test_list_and_get_through_the_cli(tmp_path, hub):
    runner = CliRunner()
    folder = tmp_path / "data"
    r = runner.invoke(solm_main.app, ["data", "get", "aime", "--data-dir", str(folder), "-q"])
    assert r.exit_code == 0, r.output
    assert [x["rows"] for x in json.loads(r.output)] == [1, 1]
    shown = {row["name"]: row for row in listing(folder)}
    assert set(shown) == set(SETS)
    assert shown["aime2024"]["on_disk"] and shown["aime2024"]["from"] == COMMIT
    assert not shown["dolly"]["on_disk"]
    r = runner.invoke(solm_main.app, ["data", "list", "--data-dir", str(folder)])
    assert r.exit_code == 0 and "aime2025" in r.output and "517,982" in r.output
    r = runner.invoke(solm_main.app, ["data", "get", "nope", "--data-dir", str(folder)])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and "unknown data set 'nope'" in lines[0]
    r = runner.invoke(solm_main.app, ["data", "get", "aime", "--from", str(folder / "x.jsonl"),
                                      "--data-dir", str(folder)])
    assert r.exit_code != 0 and "one set" in r.output


TARGETS = ["demo", "bench-pasta", "sft-pasta-cpu", "sft-lora-cpu", "bench-tip-cpu", "data"]


def test_no_make_target_reads_the_shared_folder(tmp_path):
    for target in TARGETS:
        r = subprocess.run(["make", "-n", target, f"DATA={tmp_path}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "../shared" not in r.stdout, target
    r = subprocess.run(["make", "-n", "bench-pasta", f"DATA={tmp_path}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert f"solm data get alpaca_eval_gpt4 --data-dir {tmp_path}" in r.stdout
    for path in ("Makefile", "README.md", "configs"):
        for f in ([ROOT / path] if (ROOT / path).is_file() else (ROOT / path).rglob("*")):
            if f.is_file():
                assert "../shared" not in f.read_text(), f
