import json

import pytest

from solm.core.errors import DataError, SolmError
from solm.core.records import load_records


def write(tmp_path, rows):
    p = tmp_path / "data.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_formats_convert_to_one_record_type(tmp_path):
    p = write(tmp_path, [
        {"id": "s", "conversations": [{"from": "system", "value": "S"},
                                      {"from": "human", "value": "Q1"},
                                      {"from": "gpt", "value": "A1"}]},
        {"messages": [{"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}]},
        {"instruction": "Q3", "input": "ctx", "output": "A3"},
        {"prompt": "Q4"},
    ])
    recs = list(load_records(p))
    assert [(r.prompt, r.response) for r in recs] == [
        ("Q1", "A1"), ("Q2", "A2"), ("Q3\n\nctx", "A3"), ("Q4", None)]
    assert recs[0].id == "s" and recs[0].system == "S" and recs[1].id == "data-1"


def test_unknown_format_names_file_and_line(tmp_path):
    p = write(tmp_path, [{"prompt": "ok"}, {"text": "what"}])
    with pytest.raises(DataError, match=r"data.jsonl:2"):
        list(load_records(p))


def test_missing_response_when_required(tmp_path):
    p = write(tmp_path, [{"prompt": "ok"}])
    with pytest.raises(DataError, match="response"):
        list(load_records(p, require_response=True))


def test_hub_name_offline_suggests_local_file(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(SolmError, match="local JSONL"):
        list(load_records("Open-Orca/SlimOrca", limit=1))


def test_seeded_subset_is_reproducible_and_in_input_order(tmp_path):
    from solm.core.records import sample_records
    p = write(tmp_path, [{"id": str(i), "prompt": "q"} for i in range(100)])
    a = sample_records(load_records(p), 10, seed=1)
    b = sample_records(load_records(p), 10, seed=1)
    c = sample_records(load_records(p), 10, seed=2)
    ids = [int(r.id) for r in a]
    assert [r.id for r in a] == [r.id for r in b] != [r.id for r in c]
    assert len(ids) == 10 and ids == sorted(ids) and ids != list(range(10))
