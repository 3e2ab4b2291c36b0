import json

import yaml
from typer.testing import CliRunner

from solm.cli.pasta import app

runner = CliRunner()


def _data(tmp_path):
    rows = [{"id": str(i), "prompt": "q", "response": "Intro sentence here. " + " ".join(
        ["More words follow in this paragraph to make it long enough."] * 3)} for i in range(5)]
    p = tmp_path / "in.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _ids(path):
    return [json.loads(l)["id"] for l in path.read_text().splitlines()]


def test_config_file_sets_options_and_flags_override(tmp_path):
    data = _data(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"input": str(data), "limit": 2, "min-chunk-tokens": 4}))
    out1 = tmp_path / "a.jsonl"
    r = runner.invoke(app, ["annotate", "--config", str(cfg), "-o", str(out1), "-q"])
    assert r.exit_code == 0, r.output
    assert _ids(out1) == ["0", "1"]  # limit from the file
    out2 = tmp_path / "b.jsonl"
    r = runner.invoke(app, ["annotate", "--limit", "3", "--config", str(cfg), "-o", str(out2),
                            "-q"])
    assert r.exit_code == 0, r.output
    assert _ids(out2) == ["0", "1", "2"]  # the flag wins, whatever its place


def test_unknown_config_key_is_a_clear_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("limmit: 3\n")
    r = runner.invoke(app, ["annotate", "--config", str(cfg), "-i", "x", "-o", "y"])
    assert r.exit_code != 0 and "limmit" in r.output
