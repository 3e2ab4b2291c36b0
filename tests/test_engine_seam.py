"""The engine seam (`solm.engines`): engine names are the registry's business. Until every
decode path asks its engine instead of comparing names, the comparisons left outside the
registry's modules may only go down (the seam's end state is none)."""

import re
from pathlib import Path

import pytest

from solm.core.errors import SolmError
from solm.engines import AUTO, ENGINE_CHOICES, ENGINES, choose

ROOT = Path(__file__).resolve().parents[1] / "solm"
NAME_TEST = re.compile(r"""(==|!=)\s*["'](%s)["']|["'](%s)["']\s*(==|!=)|in\s*\(\s*["'](%s)["']"""
                       % (("|".join(re.escape(n) for n in ENGINES),) * 3))
LEFT = 35  # measured when the registry landed; lower it as paths move behind the seam


def comparisons_outside_the_registry() -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.parent.name == "engines":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if NAME_TEST.search(line):
                out.append(f"{path.relative_to(ROOT.parent)}:{n}: {line.strip()}")
    return out


def test_engine_names_are_compared_ever_less_outside_the_registry():
    found = comparisons_outside_the_registry()
    assert len(found) <= LEFT, ("an engine name compared outside solm/engines (ask the "
                                "engine instead):\n" + "\n".join(found))


def test_every_engine_option_offers_the_registrys_engines():
    """The decode systems' `engine` setting and the commands' `--engine` option take their
    choices from the registry: every engine registered, and auto."""
    import dataclasses

    from typer.testing import CliRunner

    from solm.cli import main as solm_main
    from solm.decode.registry import EngineChoice

    field = next(f for f in dataclasses.fields(EngineChoice) if f.name == "engine")
    assert set(field.metadata["choices"]) == set(ENGINES) | {AUTO}
    r = CliRunner().invoke(solm_main.app, ["pasta", "decode", "--engine", "nope", "-p", "x"])
    assert r.exit_code != 0
    assert all(name in r.output for name in ENGINES)


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_an_explicit_engine_that_refuses_is_a_one_line_error(name, monkeypatch):
    engine = ENGINES[name]
    monkeypatch.setattr(engine, "unavailable", lambda: None)
    monkeypatch.setattr(engine, "refusal", lambda system, **facts: f"no {system} here")
    with pytest.raises(SolmError, match=f"--engine {re.escape(name)}: no pasta here"):
        choose(name, "pasta")
    others = [n for n in ENGINES if n != name]
    for other in others:
        monkeypatch.setattr(ENGINES[other], "unavailable", lambda: None)
        monkeypatch.setattr(ENGINES[other], "refusal", lambda system, **facts: None)
    assert choose(AUTO, "pasta") == others[0]  # auto passes over the refusing engine


def test_llama_cpp_refuses_what_its_cache_cannot_express():
    """TIP's H2O (it drops single tokens, not pages) is refused on llama.cpp, dense is not;
    torch refuses nothing."""
    from solm.decode.tip.policies import make_policy

    llama, torch_engine = ENGINES["llama.cpp"], ENGINES["torch"]
    assert llama.refusal("tip", policy=make_policy("h2o", 256, 16))
    assert llama.refusal("tip", policy=make_policy("dense", None, 16)) is None
    assert torch_engine.refusal("tip", policy=make_policy("h2o", 256, 16)) is None
