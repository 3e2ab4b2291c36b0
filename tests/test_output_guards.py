"""Guards a rerun and an output rely on: an
output folder where a file is expected, the count of undone samples, a rerun with a setting
newer than its rows, and the GGUF cache telling exports apart."""

import json

import pytest

from solm.core.errors import SolmError
from solm.core.records import Record


def test_a_folder_given_as_a_file_output_is_refused_before_any_work(tmp_path):
    from solm.core.paths import refuse_unwritable

    (tmp_path / "out.jsonl").mkdir()
    with pytest.raises(SolmError, match="is a folder"):
        refuse_unwritable([tmp_path / "out.jsonl"])
    refuse_unwritable([tmp_path / "fresh.jsonl", "-"])  # a new file and stdout are fine


def test_undone_counts_every_sample_of_every_prompt(tmp_path):
    from solm.decode.jobs import undone

    out = tmp_path / "rows.jsonl"
    held = [("a", 0), ("b", 0), ("b", 1)]
    out.write_text("".join(json.dumps({"id": i, "sample": k}) + "\n" for i, k in held))
    records = [Record("a", "A?"), Record("b", "B?"), Record("c", "C?")]
    # 3 prompts x 3 samples, 3 held: by hand, a1 a2 b2 c0 c1 c2 are left
    assert undone(records, out, samples=3, per_sample=True) == 6
    assert undone(records, out, samples=1, per_sample=False) == 1  # c


def test_a_rerun_with_a_setting_newer_than_its_rows_must_keep_that_settings_default(tmp_path):
    """Rows decoded before a setting existed were made with its default: a rerun that
    changes it would mix two kinds of rows, one that keeps it resumes."""
    from solm.core.provenance import check_rerun_settings, manifest_path

    out = tmp_path / "rows.jsonl"
    out.write_text(json.dumps({"id": "a"}) + "\n")
    manifest_path(out).write_text(json.dumps({"row_settings": {"model": "m"}}))
    defaults = {"model": "m", "keep_promises": True}
    assert check_rerun_settings(out, {"model": "m", "keep_promises": True},
                                defaults=defaults) is False
    with pytest.raises(SolmError, match="keep_promises"):
        check_rerun_settings(out, {"model": "m", "keep_promises": False}, defaults=defaults)
    with pytest.raises(SolmError, match="model"):
        check_rerun_settings(out, {"model": "other"}, defaults=defaults)


def test_the_gguf_cache_tells_exports_apart_by_type_tokens_registers_and_weights(tmp_path,
                                                                                   monkeypatch):
    from solm.engines.llamacpp.model import cached_gguf_path

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"one")
    base = dict(model=str(folder), control_tokens="tip", num_registers=16, outtype="f32")
    path = cached_gguf_path(**base)
    assert cached_gguf_path(**base) == path
    variants = [dict(base, outtype="q8_0"), dict(base, control_tokens="pasta"),
                dict(base, num_registers=4)]
    paths = {cached_gguf_path(**v) for v in variants}
    assert len(paths) == 3 and path not in paths
    (folder / "model.safetensors").write_bytes(b"other weights")
    assert cached_gguf_path(**base) != path
