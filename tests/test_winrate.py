"""Win rates: raw and length-controlled, equal to the alpaca_eval package's on the same inputs
(its hub download stubbed with a local CSV), the offline fallback, and `pasta eval winrate`."""

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from solm.core.errors import DataError
from solm.eval.length_control import lc_alpaca_eval, lc_fallback, length_controlled
from solm.eval.winrate import Judgment, read_judgments, win_rate


def synthetic(n, seed=0, quality=0.0, length_effect=0.002, model_longer=0):
    """Judgments where P(model better) = sigmoid(quality + length_effect * (len2 - len1) +
    noise); `model_longer` shifts the model's lengths."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        l1 = int(rng.integers(50, 900))
        l2 = max(1, int(rng.integers(50, 900)) + model_longer)
        logit = quality + length_effect * (l2 - l1) + rng.normal(0, 0.5)
        out.append(Judgment(f"instruction {i}", "x" * l1, "y" * l2, 1 + 1 / (1 + math.exp(-logit)),
                            "base", "model", i))
    return out


def gamed_csv(path, n, seed=1):
    """A stand-in for alpaca_eval's df_gamed.csv: two gamed baselines over n instructions, in
    its layout (one model's block after the other)."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(size=n)
    rows = [dict(index=i, instruction_difficulty=difficulty[i], model=name,
                 preference=float(rng.uniform()), std_delta_len=float(rng.normal()),
                 not_gamed_baseline=False)
            for name in ("verbose", "concise") for i in range(n)]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def alpaca_eval_frame(judgments):
    return pd.DataFrame([dict(instruction=j.instruction, output_1=j.output_1,
                              output_2=j.output_2, generator_1=j.generator_1,
                              generator_2=j.generator_2, preference=j.preference,
                              preferences=j.preference) for j in judgments])


def test_raw_win_rate_equals_alpaca_eval():
    from alpaca_eval.metrics.winrate import get_winrate

    prefs = [1, 2, 2, 1.5, 0, 1.7, 1.2, 2, 1.49, 1.51, 1.25, 1.75, float("nan")]
    judgments = [Judgment("i", "a", "b", p) for p in prefs]
    ours = win_rate(judgments)
    theirs = get_winrate(pd.DataFrame({"preference": prefs, "preferences": prefs}))
    assert ours["win_rate"] == pytest.approx(theirs["win_rate"])
    assert ours["standard_error"] == pytest.approx(theirs["standard_error"])
    assert ours["discrete_win_rate"] == pytest.approx(theirs["discrete_win_rate"])
    for k in ("n_wins", "n_wins_base", "n_draws"):
        assert ours[k] == theirs[k], k
    assert ours["n"] == theirs["n_total"] == 12 and ours["n_dropped"] == 1
    # out of range: dropped, counted (alpaca_eval's discrete rate would round 2.5 to a win)
    assert win_rate(judgments + [Judgment("i", "a", "b", 2.5)])["n_dropped"] == 2


@pytest.mark.parametrize("seed,quality", [(0, 0.0), (1, 0.8), (2, -1.0)])
def test_lc_equals_alpaca_eval(tmp_path, monkeypatch, seed, quality):
    import alpaca_eval.metrics.glm_winrate as glm

    n = 80
    judgments = synthetic(n, seed=seed, quality=quality)
    judgments[5].preference = None  # a judgment without a verdict is dropped by both
    csv = gamed_csv(tmp_path / "df_gamed.csv", n, seed=seed)
    monkeypatch.setattr(glm, "hf_hub_download", lambda **kw: str(csv))
    theirs = glm.get_length_controlled_winrate(alpaca_eval_frame(judgments),
                                               save_weights_dir=None)
    assert lc_alpaca_eval(judgments, csv) == pytest.approx(theirs["length_controlled_winrate"],
                                                           abs=1e-9)
    result = length_controlled(judgments, csv, judge="hf:smollm2-135m")
    assert result["lc_method"] == "alpaca_eval"
    assert "baseline base" in result["lc_note"] and "judge hf:smollm2-135m" in result["lc_note"]


def test_fallback_recovers_a_planted_length_bias():
    """Equal quality, the judge favours length, the model writes longer: the raw win rate is
    far above 50%, the fallback LC near it."""
    judgments = synthetic(600, seed=3, quality=0.0, length_effect=0.004, model_longer=250)
    raw = win_rate(judgments)["win_rate"]
    lc = lc_fallback(judgments)
    assert raw > 62 and abs(lc - 50) < 5, (raw, lc)
    # a real quality edge survives length control
    better = synthetic(600, seed=4, quality=1.0, length_effect=0.004, model_longer=250)
    assert lc_fallback(better) > 65
    result = length_controlled(judgments, None)
    assert result["lc_method"] == "fallback_no_difficulty" and "offline" in result["lc_note"]


def test_lc_needs_enough_verdicts_and_one_model():
    few = length_controlled(synthetic(6), None)
    assert few["lc_win_rate"] is None and "at least" in few["lc_note"]
    mixed = synthetic(40)
    mixed[0].generator_2 = "other"
    assert length_controlled(mixed, None)["lc_win_rate"] is None


def test_annotation_files_are_read_in_both_formats_with_located_errors(tmp_path):
    rows = [{"instruction": "q", "output_1": "a", "output_2": "b", "generator_1": "g1",
             "generator_2": "g2", "preference": 2}]
    as_list = tmp_path / "annotations.json"
    as_list.write_text(json.dumps(rows))
    as_jsonl = tmp_path / "annotations.jsonl"
    as_jsonl.write_text("\n".join(json.dumps(r) for r in rows * 2) + "\n")
    assert read_judgments(as_list)[0].preference == 2.0
    assert len(read_judgments(as_jsonl)) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[0], "output_2": None,
                                                            "preference": None}) + "\n" +
                   json.dumps({k: v for k, v in rows[0].items() if k != "output_1"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:3.*missing field 'output_1'"):
        read_judgments(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{**rows[0], "preference": "second"}]))
    with pytest.raises(DataError, match=r"wrong.json: item 0.*preference"):
        read_judgments(wrong)


def test_pasta_eval_winrate_prints_one_json_object(tmp_path):
    judgments = synthetic(60, seed=5, quality=0.5)
    path = tmp_path / "annotations.json"
    path.write_text(json.dumps([{**j.__dict__} for j in judgments]))
    csv = gamed_csv(tmp_path / "df_gamed.csv", 60)
    run = lambda *extra: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "solm.cli.main", "pasta", "eval", "winrate", "--annotations",
         str(path), *extra], capture_output=True, text=True, env={"SOLM_CACHE": str(tmp_path),
                                                                  "HF_HOME": str(tmp_path),
                                                                  "PATH": "/usr/bin:/bin"})
    offline = run()
    assert offline.returncode == 0, offline.stderr
    result = json.loads(offline.stdout)
    assert {"win_rate", "lc_win_rate", "lc_method", "n"} <= set(result)
    assert result["n"] == 60 and result["lc_method"] == "fallback_no_difficulty"
    assert result["win_rate"] == pytest.approx(win_rate(judgments)["win_rate"], abs=0.01)
    exact = json.loads(run("--gamed-csv", str(csv)).stdout)
    assert exact["lc_method"] == "alpaca_eval"
    assert exact["lc_win_rate"] == pytest.approx(lc_alpaca_eval(judgments, csv), abs=0.01)
    missing = run("--gamed-csv", str(tmp_path / "nope.csv"))
    assert missing.returncode != 0 and "nope.csv" in missing.stderr


@pytest.mark.parametrize("raw", [0.0, 5.0, 20.0, 37.5, 50.0, 80.0, 100.0])
def test_extreme_change_rule_equals_alpaca_evals_at_the_edges(raw):
    from alpaca_eval.metrics.glm_winrate import get_is_extreme_changes

    from solm.eval.length_control import is_extreme_change

    low = min(raw - raw / 4, raw - 10)
    high = max(raw + (100 - raw) / 4, raw + 10)
    for lc in (low - 1e-9, low, low + 1e-9, raw, high - 1e-9, high, high + 1e-9, -5.0, 105.0):
        assert is_extreme_change(raw, lc) == bool(get_is_extreme_changes(raw, lc)), (raw, lc)


def test_lc_warning_is_set_exactly_when_alpaca_eval_would_warn(monkeypatch):
    from alpaca_eval.metrics.glm_winrate import get_is_extreme_changes

    from solm.eval import length_control

    judgments = synthetic(200, seed=5)
    outcomes = set()
    for lc in (10.0, 37.0, 40.0, 49.0, 50.0, 63.0, 80.0, 95.0):
        monkeypatch.setattr(length_control, "lc_fallback", lambda js: lc)
        out = length_control.length_controlled(judgments, None)
        assert out["lc_win_rate"] == lc
        expected = bool(get_is_extreme_changes(out["win_rate"], lc))
        assert ("lc_warning" in out) == expected, (out["win_rate"], lc)
        outcomes.add(expected)
    assert outcomes == {True, False}  # the grid reaches both sides of the rule
