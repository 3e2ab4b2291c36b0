"""`pasta eval agreement`: the Wilson interval against its defining inequality solved by
bisection, the report's counts on hand-made verdicts, and the command end to end with the
fake judge (which prefers the output with more GOOD in it)."""

import json
import math
import os
import subprocess
import sys

import pytest

from fake_llm_server import FakeLLM
from solm.eval.agreement import agreement_report, published_winner, wilson_interval


def wilson_by_bisection(k, n, z=1.959963984540054):
    """The p with |k/n - p| = z sqrt(p (1 - p) / n), found numerically on each side."""
    phat = k / n

    def outside(p):
        return abs(phat - p) - z * math.sqrt(p * (1 - p) / n)

    def root(lo, hi):
        for _ in range(200):
            mid = (lo + hi) / 2
            if (outside(lo) > 0) == (outside(mid) > 0):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2
    low = 0.0 if k == 0 else root(0.0, phat)
    high = 1.0 if k == n else root(phat, 1.0)
    return low, high


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (50, 100), (63, 100), (100, 100), (7, 9)])
def test_the_wilson_interval(k, n):
    assert wilson_interval(k, n) == pytest.approx(wilson_by_bisection(k, n), abs=1e-9)


def test_published_winners():
    assert [published_winner(p) for p in (1, 2, 1.2, 1.8, 1.5, 0, None, "x")] == \
        [1, 2, 1, 2, None, None, None, None]


def row(i, p2, lean=0.0):
    # output_1 shown first gets P(o1 better) = (1 - p2) + lean, output_2 first: p2 + lean
    return {"id": f"ann-{i}", "p_2": p2,
            "p_first": {"output_1_first": 1 - p2 + lean, "output_2_first": p2 + lean}}


def test_the_report_counts():
    rows = [row(0, 0.9, 0.1), row(1, 0.2, 0.1), row(2, 0.52, 0.1), row(3, 0.5, 0.1),
            row(4, 0.7, 0.1)]
    published = {"ann-0": 2, "ann-1": 2, "ann-2": 2, "ann-3": 1, "ann-4": 0}
    r = agreement_report(rows, published)
    # decided: 0 (agree), 1 (disagree), 2 (agree), 3 (exact tie: half); 4 has no winner
    assert r["pairs_with_a_published_winner"] == 4
    assert r["agreement"] == pytest.approx(2.5 / 4)
    assert r["soft_agreement"] == pytest.approx((0.9 + 0.2 + 0.52 + 0.5) / 4, abs=1e-4)
    assert r["position_bias"] == pytest.approx(0.1)
    assert r["undecided_share"] == pytest.approx(2 / 5)  # 0.52 and 0.5
    assert r["chance_inside_interval"]
    # Wilson's 95% interval over the 4 pairs with a published winner (not all 5 rows),
    # written out: (p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    z, n, p = 1.959964, 4, 2.5 / 4
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    expected = [(centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)]
    assert r["interval"] == pytest.approx(expected, abs=1e-3)


def test_agreement_end_to_end(tmp_path):
    ann = tmp_path / "annotations.json"
    items = []
    for i in range(14):
        good_second = i % 2 == 0
        items.append({"instruction": f"Question {i}?",
                      "output_1": "plain answer" if good_second else f"GOOD answer {i}",
                      "output_2": f"GOOD answer {i}" if good_second else "plain answer",
                      "generator_1": "a", "generator_2": "b",
                      "preference": 2 if good_second else 1})
    ann.write_text(json.dumps(items))
    out = tmp_path / "agreement.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SOLM_CACHE": str(tmp_path / "cache")}
    with FakeLLM(None, position_bias=0.1) as server:
        r = subprocess.run([sys.executable, "-m", "solm.cli.main", "pasta", "eval", "agreement",
                            "-a", str(ann), "-o", str(out), "--judge",
                            f"openai:judge@{server.url}", "--limit", "12", "-q"],
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert server.judge_requests == 24
    report = json.loads(out.read_text())
    assert report["pairs_judged"] == 12 and report["agreement"] == 1.0
    assert report["soft_agreement"] == pytest.approx(0.8, abs=1e-3)
    assert report["position_bias"] == pytest.approx(0.1, abs=1e-3)
    assert report["interval"][0] > 0.5 and not report["chance_inside_interval"]
    assert "above chance" in report["reading"]


def test_agreement_reruns_reuse_judgments_only_for_the_same_judge_and_pairs(tmp_path):
    """Judgments were reused by row position (ann-0, ...): another annotations file
    written to the same -o reported old verdicts for new pairs, and a new --judge reused the
    old judge's verdicts under its own name."""
    def annotations(name, flip):
        """The fake judge prefers the GOOD answer, and so does the published annotator: B
        holds A's pairs with the outputs swapped."""
        good, plain = (f"GOOD answer {{}}", "plain answer")
        path = tmp_path / name
        path.write_text(json.dumps([
            {"instruction": f"Question {i}?",
             "output_1": good.format(i) if flip else plain,
             "output_2": plain if flip else good.format(i), "preference": 1 if flip else 2}
            for i in range(4)]))
        return path

    first, second = annotations("a.json", False), annotations("b.json", True)
    out = tmp_path / "agreement.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SOLM_CACHE": str(tmp_path / "cache")}

    def run(ann, judge, *extra):
        return subprocess.run([sys.executable, "-m", "solm.cli.main", "pasta", "eval",
                               "agreement", "-a", str(ann), "-o", str(out), "--judge", judge,
                               "-q", *extra], capture_output=True, text=True, env=env,
                              timeout=300)

    with FakeLLM(None) as server:
        judge = f"openai:judge@{server.url}"
        assert run(first, judge).returncode == 0
        assert json.loads(out.read_text())["agreement"] == 1.0
        manifest = out.with_name("agreement.judgments.jsonl.manifest.json")
        assert json.loads(manifest.read_text())["row_settings"]["judge"] == judge
        before = out.read_text()
        for ann, spec in ((second, judge), (first, f"openai:other@{server.url}")):
            r = run(ann, spec)
            assert r.returncode == 1 and "--restart" in r.stderr, r.stderr
            assert out.read_text() == before
        # judgments written before manifests existed: nothing records the file they were
        # made on, so only the pairs' ids keep file A's verdicts from file B's pairs
        manifest.unlink()
        r = run(second, judge)
        assert r.returncode == 0, r.stderr[-2000:]
        # B's own verdicts (A's, reused by position, would read 0.0 against B's winners)
        assert json.loads(out.read_text())["agreement"] == 1.0
        asked = server.judge_requests
        r = run(second, judge, "--restart")
        assert r.returncode == 0, r.stderr[-2000:]
        assert server.judge_requests == asked  # the verdict cache still answers by content
    report = json.loads(out.read_text())
    assert report["pairs_judged"] == 4 and report["agreement"] == 1.0
    assert any(p.name.startswith("agreement.json.previous-") for p in tmp_path.iterdir())
