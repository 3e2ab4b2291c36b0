"""`solm check-model`: tiny random models of the field's architectures (built from
configs here, no download) pass every system; a feature no runtime implements, or a sliding
window the check would pass, refuses the systems by name."""

import pytest
from typer.testing import CliRunner

from solm.cli.main import app
from solm.core.models import load_tokenizer, tiny_model

ARCHS = {"llama": {}, "qwen2": {}, "qwen3": {}, "mistral": {},
         "gemma2": {"attn_logit_softcapping": 0.5, "final_logit_softcapping": 2.0}}


def saved(tmp_path, arch: str, **extra):
    tok = load_tokenizer("smollm2-135m")
    model, _ = tiny_model(tok, seed=2, arch=arch, attn_implementation="eager",
                          **{**ARCHS.get(arch, {}), **extra})
    folder = tmp_path / arch
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def check(folder: str, *extra: str):
    return CliRunner().invoke(app, ["check-model", folder, "-q", *extra],
                              env={"COLUMNS": "400"})


def rows(output: str) -> dict[str, str]:
    """system -> result, read off the printed table."""
    out = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) >= 2 and cells[0] in ("sequential", "pasta", "tip", "pdiff"):
            out[cells[0]] = cells[1]
    return out


@pytest.mark.parametrize("arch", list(ARCHS))
def test_every_system_passes_on_each_architecture(tmp_path, arch):
    r = check(saved(tmp_path, arch))
    assert r.exit_code == 0, r.output
    assert rows(r.output) == {"sequential": "ok", "pasta": "ok", "tip": "ok", "pdiff": "ok"}
    if arch == "gemma2":
        assert "attention logit softcap" in r.output


def test_what_no_runtime_implements_is_refused_by_name(tmp_path):
    window = check(saved(tmp_path, "mistral", sliding_window=8))
    assert window.exit_code == 0, window.output  # refused, not wrong
    assert set(rows(window.output).values()) == {"refused"}
    assert "sliding window of 8 tokens" in window.output
    alibi = check(saved(tmp_path, "llama", alibi=True), "--systems", "tip")
    assert rows(alibi.output) == {"tip": "refused"} and "ALiBi" in alibi.output
    bad = check(saved(tmp_path, "qwen2"), "--systems", "beam")
    assert bad.exit_code != 0 and "beam" in bad.output
