"""Every decode path gives the outputs recorded before the decode house was restructured
(tokens, flags, counts; no timings): `tests/golden_outputs.py` holds the cases and records
them."""

import json

import pytest

from golden_outputs import (CASES, GOLDEN, GOLDEN_KEPT, KEPT_CASES, kept_model_digest,
                            run_case, serve_outputs, tiny_model_folder)


def _recorded(path):
    if not path.exists():
        pytest.fail(f"{path} is missing: run `python tests/golden_outputs.py record` on the "
                    f"code before the change")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def tiny_golden_model(tmp_path_factory):
    return tiny_model_folder(tmp_path_factory.mktemp("golden"))


def _first_difference(want, got, where="") -> str:
    if type(want) is not type(got):
        return f"{where}: {want!r} != {got!r}"
    if isinstance(want, dict):
        for k in sorted(set(want) | set(got)):
            if k not in want or k not in got:
                return f"{where}.{k}: only in {'the record' if k in want else 'this run'}"
            if want[k] != got[k]:
                return _first_difference(want[k], got[k], f"{where}.{k}")
    if isinstance(want, list):
        if len(want) != len(got):
            return f"{where}: {len(want)} items recorded, {len(got)} now"
        for i, (a, b) in enumerate(zip(want, got)):
            if a != b:
                return _first_difference(a, b, f"{where}[{i}]")
    return f"{where}: {want!r} != {got!r}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_outputs_are_the_recorded_ones(case, tiny_golden_model, tmp_path):
    golden = _recorded(GOLDEN)
    want = golden["cases"][case.name]
    got = run_case(case, tmp_path / case.name, tiny_golden_model)
    assert got == want, (f"{case.name} changed (recorded on {golden['machine']}): "
                         f"{_first_difference(want, got)}")


def test_servers_give_the_recorded_answers(tiny_golden_model):
    golden = _recorded(GOLDEN)
    got = serve_outputs(tiny_golden_model)
    assert got == golden["serve"], (f"serve answers changed (recorded on {golden['machine']}): "
                                    f"{_first_difference(golden['serve'], got)}")


@pytest.mark.slow
@pytest.mark.parametrize("case", KEPT_CASES, ids=[c.name for c in KEPT_CASES])
def test_kept_models_give_the_recorded_outputs(case, tmp_path):
    golden = _recorded(GOLDEN_KEPT)
    entry = golden["cases"][case.name]
    if entry["model_sha256"] != kept_model_digest(case.model):
        pytest.skip(f"{case.model} was retrained since the record: re-record it")
    got = run_case(case, tmp_path / case.name)
    assert got == entry["outputs"], (f"{case.name} changed (recorded on {golden['machine']}): "
                                     f"{_first_difference(entry['outputs'], got)}")
