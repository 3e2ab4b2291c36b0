"""Sharding by prompt and merging by id: the split covers every prompt exactly once, merges
refuse what would lose or double a prompt, and a decode sharded over two processes merges
into exactly the unsharded decode (fp32, greedy, one prompt at a time)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from solm.core.errors import SolmError
from solm.core.shard import Shard, mark_finished, mark_started, merge_file, merge_folder

TIMING = {"wall_s", "prefill_s", "decode_s", "compile_s"}


@given(n=st.integers(0, 40), count=st.integers(1, 9))
def test_shards_split_every_position_once(n, count):
    items = list(range(n))
    parts = [Shard(k, count).take(items) for k in range(count)]
    seen = sorted(x for p in parts for x in p)
    assert seen == items  # each position in exactly one shard
    for k, part in enumerate(parts):  # the rule written another way: position mod N
        assert all(x % count == k for x in part)


def test_parse():
    assert Shard.parse("1/4") == Shard(1, 4)
    assert Shard.parse(None) is None
    assert Shard.parse("auto", {"WORLD_SIZE": "8", "RANK": "3", "LOCAL_RANK": "3"}) == Shard(3, 8, 3)
    # two machines of 4 GPUs: the shard is the global RANK, the device the LOCAL_RANK
    assert Shard.parse("auto", {"WORLD_SIZE": "8", "RANK": "6", "LOCAL_RANK": "2"}) == Shard(6, 8, 2)
    with pytest.raises(SolmError, match="RANK and WORLD_SIZE not set"):
        Shard.parse("auto", {})  # not under a launcher: refused, not the whole job silently
    with pytest.raises(SolmError, match="RANK not set"):
        Shard.parse("auto", {"WORLD_SIZE": "2"})
    assert Shard.parse("auto", {"WORLD_SIZE": "1", "RANK": "0"}) is None
    for bad in ("4/4", "1", "a/b", "-1/2", "0/0"):
        with pytest.raises(SolmError):
            Shard.parse(bad)
    assert Shard(2, 8).file(Path("o/out.jsonl")) == Path("o/out.shard-2-of-8.jsonl")
    assert Shard(2, 8).folder(Path("o/run")) == Path("o/run/shard-2-of-8")


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_merge_file_orders_by_prompts_and_refuses_gaps(tmp_path):
    out = tmp_path / "out.jsonl"
    _write(tmp_path / "out.shard-0-of-2.jsonl", [{"id": "c", "v": 3}, {"id": "a", "v": 1}])
    with pytest.raises(SolmError, match="shard\\(s\\) 1 of 2 are missing"):
        merge_file(out)
    _write(tmp_path / "out.shard-1-of-2.jsonl", [{"id": "b", "v": 2}])
    merge_file(out, ["a", "b", "c"])
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["a", "b", "c"]
    with pytest.raises(SolmError, match="1 missing"):
        merge_file(out, ["a", "b", "c", "d"])
    _write(tmp_path / "out.shard-1-of-2.jsonl", [{"id": "b"}, {"id": "a"}])
    with pytest.raises(SolmError, match="'a' is also in"):
        merge_file(out)
    _write(tmp_path / "out.shard-0-of-3.jsonl", [])
    with pytest.raises(SolmError, match="different counts"):
        merge_file(out)


def test_merge_folder_joins_each_file(tmp_path):
    run = tmp_path / "run"
    _write(run / "shard-0-of-2" / "outputs" / "m.jsonl", [{"id": "a"}])
    _write(run / "shard-1-of-2" / "outputs" / "m.jsonl", [{"id": "b"}])
    _write(run / "shard-0-of-2" / "samples.jsonl", [{"id": "a", "s": 0}, {"id": "a", "s": 1}])
    _write(run / "shard-1-of-2" / "samples.jsonl", [{"id": "b", "s": 0}])
    for k, machine in enumerate(("cuda:0", "cuda:1")):
        (run / f"shard-{k}-of-2" / "run.json").write_text('{"model": "m"}')
        (run / f"shard-{k}-of-2" / "machine.json").write_text(machine)
    with pytest.raises(SolmError, match="no shard marker"):
        merge_folder(run)
    for k, ids in enumerate((["a"], ["b"])):
        mark_started(Shard(k, 2), run / f"shard-{k}-of-2", True, ids)
        mark_finished(Shard(k, 2), run / f"shard-{k}-of-2", True)
    result = merge_folder(run)
    assert result["files"] == {"outputs/m.jsonl": 2, "samples.jsonl": 3}
    assert result["copied"] == ["run.json"] and result["differing"] == ["machine.json"]
    # a file only one shard holds cannot be the run's own: named, not copied
    (run / "shard-0-of-2" / "notes.txt").write_text("shard 0 only")
    result = merge_folder(run)
    assert "notes.txt" in result["differing"] and "notes.txt" not in result["copied"]
    assert not (run / "notes.txt").exists()
    assert (run / "run.json").read_text() == '{"model": "m"}' and not (run / "machine.json").exists()
    assert [json.loads(x)["id"] for x in (run / "samples.jsonl").read_text().splitlines()] \
        == ["a", "a", "b"]
    _write(run / "shard-1-of-2" / "samples.jsonl", [{"id": "a", "s": 2}])
    with pytest.raises(SolmError, match="shards must split the prompts"):
        merge_folder(run)


def _finished_shards(folder: Path, shards: dict[int, list[dict]], n: int) -> None:
    for k, rows in shards.items():
        path = folder / f"out.shard-{k}-of-{n}.jsonl"
        _write(path, rows)
        mark_started(Shard(k, n), path, False, [r["id"] for r in rows])
        mark_finished(Shard(k, n), path, False)


def test_merge_keeps_the_rows_its_output_already_holds(tmp_path):
    """An out.jsonl holding an earlier row lost it to `solm merge`."""
    out = tmp_path / "out.jsonl"
    _write(out, [{"id": "z", "v": 0}])
    _finished_shards(tmp_path, {0: [{"id": "a", "v": 1}], 1: [{"id": "b", "v": 2}]}, 2)
    result = merge_file(out)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == [{"id": "z", "v": 0}, {"id": "a", "v": 1}, {"id": "b", "v": 2}]
    assert (result["kept"], result["added"]) == (1, 2)
    merge_file(out)  # merged twice: the same rows, nothing doubled
    assert [json.loads(x) for x in out.read_text().splitlines()] == rows
    # with the prompts: their order, and the earlier row kept after them
    merge_file(out, ["b", "a"])
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["b", "a", "z"]
    _write(out, [{"id": "a", "v": "other"}])
    before = out.read_text()
    with pytest.raises(SolmError, match="already holds rows for id 'a' that differ"):
        merge_file(out)
    assert out.read_text() == before  # refused: nothing written


def test_merge_refuses_an_unfinished_shard(tmp_path):
    out = tmp_path / "out.jsonl"
    _finished_shards(tmp_path, {0: [{"id": "a"}], 1: [{"id": "b"}, {"id": "c"}]}, 2)
    shard1 = tmp_path / "out.shard-1-of-2.jsonl"
    _write(shard1, [{"id": "b"}])  # a shard file that lost a row (or was emptied)
    with pytest.raises(SolmError, match="holds 1 of its 2 prompts \(first missing: 'c'\)"):
        merge_file(out)
    _write(shard1, [])
    with pytest.raises(SolmError, match="holds 0 of its 2 prompts"):
        merge_file(out)
    mark_started(Shard(1, 2), shard1, False, ["b", "c"])  # started again, not finished
    _write(shard1, [{"id": "b"}, {"id": "c"}])
    with pytest.raises(SolmError, match="has not finished"):
        merge_file(out)
    assert not out.exists()
    mark_finished(Shard(1, 2), shard1, False)
    assert merge_file(out)["rows"] == 3


def test_merge_folder_refuses_to_overwrite_different_rows_and_carries_the_settings(tmp_path):
    """A copy of a finished prefs run plus two shard folders: samples.jsonl went from 6
    rows to 2 without a word. Now the merge refuses and writes nothing; shards made alike
    merge, and the merged folder's manifest keeps refusing other settings."""
    from solm.core.provenance import guard_folder, write_manifest

    run = tmp_path / "prefs"
    earlier = [{"id": i, "sample": k, "t": 1.0} for i in "abc" for k in (0, 1)]
    _write(run / "samples.jsonl", earlier)
    for k, ids in enumerate((["a", "c"], ["b"])):
        shard = run / f"shard-{k}-of-2"
        _write(shard / "samples.jsonl", [{"id": i, "sample": 0, "t": 2.0} for i in ids])
        write_manifest(shard, "pasta prefs", {}, row_settings={"model": "m", "seed": 0})
        mark_started(Shard(k, 2), shard, True, ids)
        mark_finished(Shard(k, 2), shard, True)
    with pytest.raises(SolmError, match="already holds rows for id 'a'"):
        merge_folder(run)
    assert [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()] == earlier
    (run / "samples.jsonl").unlink()
    write_manifest(run / "shard-1-of-2", "pasta prefs", {},
                   row_settings={"model": "m", "seed": 1})
    with pytest.raises(SolmError, match="different settings \(seed differ"):
        merge_folder(run)
    write_manifest(run / "shard-1-of-2", "pasta prefs", {},
                   row_settings={"model": "m", "seed": 0})
    result = merge_folder(run)
    assert result["files"] == {"samples.jsonl": 3}
    assert "solm_manifest.json" not in result["differing"]
    with pytest.raises(SolmError, match="model='m' \(now 'other'\)"):
        guard_folder(run, {"model": "other", "seed": 0}, False, ["samples.jsonl"])


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "solm.cli.main", *args]


@pytest.mark.slow
def test_sharded_decode_in_two_processes_equals_unsharded(tmp_path, tiny_folder):
    prompts = tmp_path / "prompts.jsonl"
    _write(prompts, [{"id": f"p{i}", "prompt": f"Name {i + 2} colours and say why."}
                     for i in range(5)])
    common = ["pasta", "decode", "-m", tiny_folder, "-p", str(prompts), "--dtype", "fp32",
              "--device", "cpu", "--temperature", "0", "--max-new-tokens", "12",
              "--batch-size", "1", "--no-compile", "-q"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    whole = tmp_path / "whole.jsonl"
    sharded = tmp_path / "sharded.jsonl"
    procs = [subprocess.Popen(_cli(*common, "-o", str(sharded), "--shard", f"{k}/2"), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in range(2)]
    subprocess.run(_cli(*common, "-o", str(whole)), env=env, check=True, capture_output=True)
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()[-2000:]
    parts = [[json.loads(x)["id"] for x in sharded.with_name(f"sharded.shard-{k}-of-2.jsonl")
              .read_text().splitlines()] for k in range(2)]
    assert parts == [["p0", "p2", "p4"], ["p1", "p3"]]  # two processes, each its own prompts
    subprocess.run(_cli("merge", str(sharded), "-p", str(prompts)), env=env, check=True,
                   capture_output=True)
    merged = [json.loads(x) for x in sharded.read_text().splitlines()]
    expected = [json.loads(x) for x in whole.read_text().splitlines()]
    assert [r["id"] for r in merged] == [f"p{i}" for i in range(5)]  # every id exactly once
    strip = lambda r: {k: v for k, v in r.items() if k not in TIMING}  # noqa: E731
    assert [strip(r) for r in merged] == [strip(r) for r in expected]
    assert any(r["response"] for r in expected)


def test_sharded_eval_run_merges_and_finishes_without_decoding_again(tmp_path, tiny_folder):
    """`pasta eval run --shard K/2` into one run folder, `solm merge`, then the same command
    without --shard: it finds every prompt decoded (no new row) and its outputs equal an
    unsharded run's."""
    from typer.testing import CliRunner

    from solm.cli import main as solm_main, pasta_eval

    prompts = tmp_path / "alpaca.jsonl"
    prompts.write_text("".join(json.dumps({"instruction": f"List {i + 2} fruits."}) + "\n"
                               for i in range(5)))
    args = ["--prompts", str(prompts), "--method", f"sequential={tiny_folder}",
            "--method", f"apar={tiny_folder}", "--no-judge", "--max-new-tokens", "8",
            "--dtype", "fp32", "--device", "cpu", "--no-compile", "-q"]
    runner = CliRunner()
    whole, run = tmp_path / "whole", tmp_path / "run"
    assert runner.invoke(pasta_eval.app, ["run", "-o", str(whole), *args]).exit_code == 0
    for k in range(2):
        r = runner.invoke(pasta_eval.app, ["run", "-o", str(run), "--shard", f"{k}/2", *args])
        assert r.exit_code == 0, r.output
    assert not (run / "outputs").exists()  # the shards wrote only their own folders
    r = runner.invoke(solm_main.app, ["merge", str(run)])
    assert r.exit_code == 0, r.output
    before = {p.name: p.read_text() for p in (run / "outputs").glob("*.jsonl")}
    r = runner.invoke(pasta_eval.app, ["run", "-o", str(run), *args])
    assert r.exit_code == 0, r.output
    after = {p.name: p.read_text() for p in (run / "outputs").glob("*.jsonl")}
    assert after == before  # nothing decoded twice
    for label in ("sequential", "apar"):
        got = {x["id"]: x for x in map(json.loads, after[f"{label}.jsonl"].splitlines())}
        want = {x["id"]: x for x in map(json.loads, (whole / "outputs" / f"{label}.jsonl")
                                         .read_text().splitlines())}
        assert set(got) == set(want) and len(got) == 5
        for rid, row in want.items():
            assert got[rid]["output"] == row["output"]
            assert got[rid]["forward_passes"] == row["forward_passes"]


def _key_rows(path: Path, key) -> dict:
    return {key(r): r for r in map(json.loads, path.read_text().splitlines()) if r}


@pytest.mark.slow
def test_sharded_prefs_merge_into_the_unsharded_samples_and_pairs(tmp_path, tiny_folder):
    """Preference sampling split over two shards (λ = 0: no judge), merged, then finished by
    the unsharded command: the same samples and pairs as one unsharded run, nothing sampled
    twice, and the pairs load for BoNBoN."""
    from solm.train.bonbon import load_pairs

    prompts = tmp_path / "p.jsonl"
    _write(prompts, [{"id": f"q{i}", "prompt": f"Give {i + 2} tips for sleep."}
                     for i in range(5)])
    args = ["pasta", "prefs", "-p", str(prompts), "-m", tiny_folder, "--baseline-model",
            tiny_folder, "-n", "3", "--max-new-tokens", "8", "--quality-weight", "0",
            "--dtype", "fp32", "--batch-size", "4", "-q"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    run = lambda *extra: subprocess.run(_cli(*args, *extra), env=env, capture_output=True,  # noqa: E731
                                        text=True, timeout=600)
    whole, sharded = tmp_path / "whole", tmp_path / "sharded"
    for r in (run("-o", str(whole)), run("-o", str(sharded), "--shard", "0/2"),
              run("-o", str(sharded), "--shard", "1/2")):
        assert r.returncode == 0, r.stderr[-2000:]
    merged = subprocess.run(_cli("merge", str(sharded)), env=env, capture_output=True, text=True)
    assert merged.returncode == 0, merged.stderr
    before = (sharded / "samples.jsonl").read_text()
    finish = run("-o", str(sharded))
    assert finish.returncode == 0, finish.stderr[-2000:]
    assert (sharded / "samples.jsonl").read_text() == before  # nothing sampled again
    sample_key = lambda r: (r["id"], r["sample"])  # noqa: E731
    got = _key_rows(sharded / "samples.jsonl", sample_key)
    want = _key_rows(whole / "samples.jsonl", sample_key)
    assert set(got) == set(want) and {k[0] for k in got} == {f"q{i}" for i in range(5)}
    assert all(got[k]["ids"] == want[k]["ids"] for k in want)  # seeded per prompt and sample
    pairs = _key_rows(sharded / "pairs.jsonl", lambda r: r["id"])
    assert pairs == _key_rows(whole / "pairs.jsonl", lambda r: r["id"])
    summaries = [json.loads((f / "summary.json").read_text()) for f in (sharded, whole)]
    assert summaries[0]["skipped"] == summaries[1]["skipped"]
    if pairs:  # a tiny model's samples often tie on speed (tied pairs are left out)
        assert len(load_pairs(str(sharded / "pairs.jsonl"))) == len(pairs)


def test_sharded_tip_eval_merges_and_reports(tmp_path, tiny_folder):
    """`tip eval run --shard K/2` twice, `solm merge` (run.json copied: every shard wrote the
    same), then `tip eval report` on the merged run: the same samples as an unsharded run."""
    from typer.testing import CliRunner

    from solm.cli import main as solm_main, tip

    data = tmp_path / "probs.jsonl"
    _write(data, [{"id": f"p{i}", "problem": f"What is {i}+1?", "answer": str(i + 1)}
                  for i in range(3)])
    args = ["--data", str(data), "--model", tiny_folder, "--registers", "4", "--policies",
            "dense,tip", "--samples", "2", "--max-new-tokens", "6", "--page-size", "4",
            "--batch-size", "3", "--dtype", "fp32", "--quiet"]
    runner = CliRunner()
    whole, run = tmp_path / "whole", tmp_path / "run"
    assert runner.invoke(tip.app, ["eval", "run", "-o", str(whole), *args]).exit_code == 0
    for k in range(2):
        r = runner.invoke(tip.app, ["eval", "run", "-o", str(run), "--shard", f"{k}/2", *args])
        assert r.exit_code == 0, r.output
    r = runner.invoke(solm_main.app, ["merge", str(run)])
    assert r.exit_code == 0, r.output
    assert json.loads((run / "run.json").read_text()) == \
        json.loads((whole / "run.json").read_text())
    key = lambda r: (r["id"], r["policy"], r["budget"], r["sample"])  # noqa: E731
    got, want = _key_rows(run / "samples.jsonl", key), _key_rows(whole / "samples.jsonl", key)
    assert set(got) == set(want) and len(got) == 3 * 2 * 2
    assert all(got[k]["response"] == want[k]["response"] for k in want)
    r = runner.invoke(tip.app, ["eval", "report", str(run), "--quiet"])
    assert r.exit_code == 0, r.output
    assert (run / "report" / "report.md").exists()


def test_merge_without_prompts_restores_the_prompts_order(tmp_path):
    """A new user's trial: `solm merge` wrote rows in shard order (a, d, g, b, e, ...)."""
    prompts = [f"p{i}" for i in range(8)]
    for count in (2, 3):
        out = tmp_path / f"out{count}.jsonl"
        for k in range(count):
            shard = Shard(k, count)
            mine = shard.take(prompts)
            path = shard.file(out)
            mark_started(shard, path, False, mine)
            # rows written in the order they finished (a batched decode), not prompt order
            _write(path, [{"id": p} for p in reversed(mine)])
            mark_finished(shard, path, False)
        merge_file(out)
        assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == prompts


def test_merge_with_prompts_refuses_ids_the_prompts_do_not_hold(tmp_path):
    """The id checks of `solm merge --prompts`: an id in no prompt, a missing prompt and an
    id in two shards are each refused, and nothing is written."""
    out = tmp_path / "out.jsonl"
    _finished_shards(tmp_path, {0: [{"id": "a"}, {"id": "x"}], 1: [{"id": "b"}]}, 2)
    with pytest.raises(SolmError, match=r"0 missing .*1 not in the prompts \(first: \['x'\]\)"):
        merge_file(out, ["a", "b"])
    with pytest.raises(SolmError, match=r"1 missing \(first: \['c'\]\)"):
        merge_file(out, ["a", "b", "x", "c"])
    assert not out.exists()
    assert merge_file(out, ["x", "b", "a"])["rows"] == 3
    assert [json.loads(r)["id"] for r in out.read_text().splitlines()] == ["x", "b", "a"]
