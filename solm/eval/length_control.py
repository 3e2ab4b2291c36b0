"""AlpacaEval 2's length-controlled win rate, and an offline fallback.

The GLM (alpaca_eval `length_controlled_v1`): a logistic model of the soft preference
P(output_2 better) with, and no intercept,
    tanh(std_delta_len) + instruction_difficulty + not_gamed_baseline,
where std_delta_len = (len(output_1) - len(output_2)) in characters over its standard deviation.
It is fitted on the model's judgments together with AlpacaEval's "gamed" judgments (the
baseline against versions of itself told to be verbose or concise; weight 0.1 each), L1 with
the regularisation chosen by 5-fold cross-validation grouped by judgment, soft labels entered
as two weighted rows. LC = mean predicted P(output_2 better) with the length term at zero, in
percent. The per-instruction difficulties and the gamed judgments come from alpaca_eval's
`df_gamed.csv` (hub dataset tatsu-lab/alpaca_eval); they were fitted for AlpacaEval's baseline
(gpt4_1106_preview) and judge (weighted_alpaca_eval_gpt4_turbo).

Offline, without that file, the fallback fits the same GLM without the difficulty term (its
`not_gamed_baseline` column is then a plain intercept) on the model's judgments alone. Its
figure is labelled `lc_method: "fallback_no_difficulty"`: it removes a length bias, but drops
the difficulty spread, which moves it (on one published model: 13.0 against 10.43).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from solm.core.errors import DataError
from solm.eval.winrate import Judgment, valid_preferences, win_rate

AE_BASELINE = "gpt4_1106_preview"
AE_JUDGE = "weighted_alpaca_eval_gpt4_turbo"
GAMED_WEIGHT = 0.2 / 2  # alpaca_eval's regularize_to_baseline_lambda, over two gamed baselines
N_SPLITS = 5


def find_gamed_csv(explicit: str | os.PathLike | None = None) -> Path | None:
    """`--gamed-csv`, else `$SOLM_GAMED_CSV`, else df_gamed.csv in the local Hugging Face hub
    cache (where `alpaca_eval` downloads it), else None."""
    for candidate in (explicit, os.environ.get("SOLM_GAMED_CSV")):
        if candidate:
            path = Path(candidate)
            if not path.is_file():
                raise DataError("df_gamed.csv not found", path=str(path))
            return path
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(Path.home(), ".cache", "huggingface"), "hub")
    found = sorted(Path(hub).glob("datasets--tatsu-lab--alpaca_eval/snapshots/*/df_gamed.csv"))
    return found[-1] if found else None


def _fit_soft_logistic(x: np.ndarray, p: np.ndarray, weight: np.ndarray | None):
    """alpaca_eval's `fit_LogisticRegressionCV(is_ytrue_proba=True)`: every row twice (label 1
    weighted p, label 0 weighted 1 - p), L1 liblinear, C by grouped 5-fold CV scored with the
    soft log-loss."""
    import sklearn
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GroupKFold

    n = len(p)
    x2 = np.concatenate([x, x])
    y2 = np.concatenate([np.ones(n, dtype=int), np.zeros(n, dtype=int)])
    true_prob = np.concatenate([p, 1 - p])
    groups = np.concatenate([np.arange(n), np.arange(n)])
    true_weight = None if weight is None else np.concatenate([weight, weight])
    sample_weight = true_prob if weight is None else true_prob * true_weight

    def soft_log_loss(y_true, y_pred, true_prob, true_sample_weight=None):
        target = np.where(y_true == 1, true_prob, 1 - true_prob)
        y_pred = np.clip(y_pred, 1e-15, 1 - 1e-15)
        losses = target * np.log(y_pred) + (1 - target) * np.log(1 - y_pred)
        if true_sample_weight is not None:
            losses = losses * true_sample_weight
        return -np.mean(losses)

    with sklearn.config_context(enable_metadata_routing=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # sklearn's parameter renames
        scorer = make_scorer(soft_log_loss, response_method="predict_proba",
                             greater_is_better=False).set_score_request(
            true_sample_weight=True, true_prob=True)
        model = LogisticRegressionCV(cv=GroupKFold(n_splits=N_SPLITS), scoring=scorer,
                                     random_state=123, dual=False, penalty="l1",
                                     solver="liblinear", n_jobs=None, fit_intercept=False)
        model.set_fit_request(sample_weight=True)
        model.fit(x2, y2, sample_weight=sample_weight, groups=groups,
                  true_sample_weight=true_weight, true_prob=true_prob)
    return model


def _std_delta_len(judgments: list[Judgment]) -> np.ndarray:
    delta = np.array([len(j.output_1) - len(j.output_2) for j in judgments], dtype=float)
    std = delta.std(ddof=1) if len(delta) > 1 else 0.0
    return delta / std if std > 0 else np.zeros_like(delta)


def _soft(judgments: list[Judgment]) -> np.ndarray:
    """P(output_2 better) per judgment; NaN where there is no verdict."""
    out = []
    for j in judgments:
        pref = 1.5 if j.preference == 0 else j.preference
        out.append(np.nan if pref is None else pref - 1)
    return np.array(out, dtype=float)


def read_gamed(path: Path) -> dict:
    import pandas as pd

    df = pd.read_csv(path)
    missing = {"index", "instruction_difficulty", "preference", "std_delta_len",
               "not_gamed_baseline"} - set(df.columns)
    if missing:
        raise DataError(f"missing column(s) {', '.join(sorted(missing))}", path=str(path))
    first = df.drop_duplicates("index")
    difficulty = dict(zip(first["index"].astype(int), first["instruction_difficulty"]))
    return {"difficulty": difficulty, "rows": df}


def lc_alpaca_eval(judgments: list[Judgment], gamed_csv: Path) -> float:
    """LC exactly as `alpaca_eval.metrics.glm_winrate.get_length_controlled_winrate` computes
    it. Instructions are matched to difficulties by each judgment's `index` (its position in
    AlpacaEval's 805), else by row position, as alpaca_eval does."""
    gamed = read_gamed(gamed_csv)
    difficulty_of = gamed["difficulty"]
    rows = gamed["rows"]
    indices = [j.index if j.index is not None else i for i, j in enumerate(judgments)]
    try:
        difficulty = np.array([difficulty_of[i] for i in indices], dtype=float)
    except KeyError as e:
        raise DataError(f"instruction index {e.args[0]} is not in df_gamed.csv (AlpacaEval has "
                        f"805 instructions); give each judgment its AlpacaEval 'index'",
                        path=str(gamed_csv)) from None
    p = _soft(judgments)
    x_model = np.column_stack([np.tanh(_std_delta_len(judgments)), difficulty,
                               np.ones(len(judgments))])
    x_gamed = np.column_stack([np.tanh(rows["std_delta_len"].to_numpy(float)),
                               rows["instruction_difficulty"].to_numpy(float),
                               rows["not_gamed_baseline"].astype(float).to_numpy()])
    p_gamed = rows["preference"].to_numpy(float)
    weight_gamed = np.where(rows["not_gamed_baseline"].astype(bool).to_numpy(), 1.0,
                            GAMED_WEIGHT)
    x = np.concatenate([x_gamed, x_model])
    y = np.concatenate([p_gamed, p])
    w = np.concatenate([weight_gamed, np.ones(len(p))])
    keep = ~np.isnan(y)
    model = _fit_soft_logistic(x[keep], y[keep], w[keep])
    x_test = x_model.copy()
    x_test[:, 0] = 0.0
    return float(model.predict_proba(x_test)[:, 1].mean() * 100)


def lc_fallback(judgments: list[Judgment]) -> float:
    """The GLM without the difficulty term, fitted on these judgments alone."""
    p = _soft(judgments)
    x = np.column_stack([np.tanh(_std_delta_len(judgments)), np.ones(len(judgments))])
    keep = ~np.isnan(p)
    model = _fit_soft_logistic(x[keep], p[keep], None)
    x_test = x.copy()
    x_test[:, 0] = 0.0
    return float(model.predict_proba(x_test)[:, 1].mean() * 100)


def length_controlled(judgments: list[Judgment], gamed_csv: Path | None = None,
                      judge: str | None = None) -> dict:
    """Raw and length-controlled win rates, with how LC was computed and what it is calibrated
    for. Needs at least N_SPLITS judgments with a verdict (and two different lengths)."""
    out = dict(win_rate(judgments))
    out["lc_win_rate"], out["lc_method"] = None, None
    generators = sorted({j.generator_1 for j in judgments})
    if len(valid_preferences(judgments)) < 2 * N_SPLITS:
        out["lc_note"] = f"LC needs at least {2 * N_SPLITS} judgments with a verdict"
        return out
    if len({j.generator_2 for j in judgments}) > 1:
        out["lc_note"] = "LC is fitted per model: these judgments mix several generator_2"
        return out
    if gamed_csv is not None:
        out["lc_win_rate"] = lc_alpaca_eval(judgments, gamed_csv)
        out["lc_method"] = "alpaca_eval"
        caveats = []
        if generators != [AE_BASELINE]:
            caveats.append(f"baseline {', '.join(generators)}")
        if judge is not None and judge != AE_JUDGE:
            caveats.append(f"judge {judge}")
        if caveats:
            out["lc_note"] = (f"difficulty terms fitted for baseline {AE_BASELINE} and judge "
                              f"{AE_JUDGE}; here: {' and '.join(caveats)}")
    else:
        out["lc_win_rate"] = lc_fallback(judgments)
        out["lc_method"] = "fallback_no_difficulty"
        out["lc_note"] = ("offline: no df_gamed.csv (give --gamed-csv), so no per-instruction "
                          "difficulty term; not comparable with AlpacaEval's leaderboard")
    if is_extreme_change(out["win_rate"], out["lc_win_rate"]):
        out["lc_warning"] = ("LC is far from the raw win rate: the length term explains most "
                             "preferences (outputs of one side are nearly always longer), so LC "
                             "extrapolates to equal lengths; read it with care")
    return out


def is_extreme_change(raw: float, lc: float, abs_diff: float = 10, rel_diff: float = 4) -> bool:
    """alpaca_eval's warning rule for an LC far from the raw win rate."""
    too_small = lc < min(raw - raw / rel_diff, raw - abs_diff)
    too_large = lc > max(raw + (100 - raw) / rel_diff, raw + abs_diff)
    return too_small or too_large
