"""Annotation shaped for speed, the annotation-level gain, and the mix selected by it.

Oracles: the Pasta-Lang parser (what stays in the main thread, each promise's topic and
block), the tokenizer counted directly (what a promise costs), and the PASTA runtime replaying
an annotation (its forward passes) with content tokens counted by a walk of the ids."""

import re
import json
import math
import os

import pytest

from conftest import PARAGRAPHS, SAMPLE, shared_path
from solm.annotate.gain import annotation_stats, gain_meter, gain_summary
from solm.annotate.mix import prompt_key, sft_mix
from solm.annotate.rules import ITEM_RE, RuleShape, annotate_rules, promise_cost
from solm.core.chat import text_ids
from solm.core.errors import DataError
from solm.core.pasta_lang import Promise, Sync, parse, strip
from solm.core.records import load_records

LIST = ("Here are tips:\n\n1. **Sleep well**: Get seven to eight hours of sleep every night, "
        "and keep a regular schedule even on weekends.\n2. The water - drink at least two "
        "litres a day, more when it is hot or when you exercise a lot.\n3. Walk.\n\n"
        "These help. Really, they help a great deal with everything you do every day.")


@pytest.fixture(scope="module")
def count(pasta_tokenizer):
    from solm.core.models import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    return lambda s: len(tok(s, add_special_tokens=False).input_ids)


@pytest.fixture(scope="module")
def meter():
    return gain_meter("smollm2-135m")


def responses() -> list[str]:
    sources = [SAMPLE, *[p for p in (shared_path("instruct", "dolly_5k.jsonl"),
                                     shared_path("instruct", "openorca_gpt4_284.jsonl"))
                         if os.path.exists(p)]]
    return [r.response for s in sources for r in load_records(s) if r.response][:1500]


def groups(annotated: str) -> list[str]:
    """The annotation cut after each <sync/>: a group of forks and the text before them."""
    out, cur = [], []
    for item in parse(annotated):
        cur.append(item)
        if isinstance(item, Sync):
            out.append(cur)
            cur = []
    from solm.core.pasta_lang import serialize

    return [serialize(g) for g in out if any(isinstance(i, Promise) for i in g)]


def test_the_speed_shape_moves_an_items_header_into_its_block(count, meter):
    ann, n = annotate_rules(LIST, count, shape=RuleShape.speed(), gain_of=meter)
    assert strip(ann) == LIST and n == 2
    items = parse(ann)
    first = next(i for i, x in enumerate(items) if isinstance(x, Promise))
    # the main thread holds only the list marker before the promise; the space after it
    # opens the block (so a word keeps the space a tokenizer joins it to)
    assert re.fullmatch(r"\d{1,3}[.)]|[-*•+]", items[first - 1].text.split("\n")[-1])
    p1, p2 = [x for x in items if isinstance(x, Promise)]
    assert p1.body.startswith(" **Sleep well**: Get") and p1.topic == "Sleep"
    assert p2.body.startswith(" The water - drink") and p2.topic == "water"  # article skipped
    # the paragraph fork stands alone (nothing runs beside it): it does not pay, so no fork
    assert "These help.<promise" not in ann
    apar, _ = annotate_rules(LIST, count)
    assert "These help.<promise" in apar


def test_paragraphs_fork_together_when_asked(count, meter):
    """Apart (the default), each paragraph is a group of its own: a lone fork runs beside
    nothing and the speed shape leaves it plain. Together, the three long paragraphs fork in
    one group: each keeps its first sentence in the main thread, one <sync/> joins them, the
    short opening paragraph stays plain text, and stripping gives the answer back."""
    apart, n = annotate_rules(PARAGRAPHS, count, shape=RuleShape.speed(), gain_of=meter)
    assert n == 0 and apart == PARAGRAPHS
    ann, n = annotate_rules(PARAGRAPHS, count, gain_of=meter,
                            shape=RuleShape.speed(paragraphs_together=True))
    assert strip(ann) == PARAGRAPHS and n == 3
    assert ann.count("<sync/>") == 1 and ann.rstrip().endswith("<sync/>")
    heads = re.findall(r"(?:^|\n\n)([^<\n]*)<promise", ann)
    assert heads == ["First, Iceland.", "Next, Norway.", "Finally, the Alps."]
    assert ann.startswith(PARAGRAPHS.split("\n\n")[0] + "\n\n")
    assert meter(ann) > 1.3


# words a one-word topic must never be: they open a sentence without naming anything
NOT_A_SUBJECT = {"however", "additionally", "finally", "another", "lastly", "overall",
                 "moreover", "furthermore", "first", "the", "it", "its", "this", "they", "i"}


def test_a_one_word_topic_names_its_paragraph(count, meter):
    """A paragraph fork's one-word topic is the longest naming word of the sentence the main
    thread keeps ("First, Iceland." -> "Iceland", never "First"); on real answers no topic is
    a discourse marker, a pronoun or a contraction, and each is a word of its paragraph."""
    ann, n = annotate_rules(PARAGRAPHS, count, gain_of=meter,
                            shape=RuleShape.speed(paragraphs_together=True))
    assert [p.topic for p in parse(ann) if isinstance(p, Promise)] == [
        "Iceland", "Norway", "Alps"]
    shape = RuleShape.speed(paragraphs_together=True)
    seen = 0
    for response in responses()[:600]:
        ann, n = annotate_rules(response, count, shape=shape, gain_of=meter)
        items = parse(ann)
        for k, p in enumerate(items):
            if not isinstance(p, Promise):
                continue
            before = items[k - 1].text if k and hasattr(items[k - 1], "text") else ""
            paragraph = before.split("\n\n")[-1] + p.body
            word = p.topic.lower()
            assert word not in NOT_A_SUBJECT and "'" not in word and "’" not in word, p.topic
            assert re.search(rf"(?<![\w]){re.escape(p.topic)}", paragraph), (p.topic, paragraph)
            seen += 1
    assert seen > 50


def test_speed_forks_outlast_their_promise_and_every_group_pays(count, meter):
    """On real responses: every block is longer than its promise's tokens in the main thread,
    every topic has the shape's words, and each group of forks, measured alone, gives more
    content tokens than forward passes; the APAR shape has groups that do not (not vacuous)."""
    shape = RuleShape.speed()
    paying = losing_apar = 0
    for response in responses():
        ann, n = annotate_rules(response, count, shape=shape, gain_of=meter)
        assert strip(ann) == response
        if not n:
            apar, m = annotate_rules(response, count)
            losing_apar += m > 0 and any(meter(g) <= 1.0 for g in groups(apar))
            continue
        for p in (x for x in parse(ann) if isinstance(x, Promise)):
            assert count(p.body) > promise_cost(p.topic, count)
            assert 1 <= len(p.topic.split()) <= shape.topic_words
        for g in groups(ann):
            assert meter(g) > 1.0
            paying += 1
    assert paying > 20 and losing_apar > 20


def test_the_gain_is_content_tokens_over_the_runtimes_forward_passes(pasta_tokenizer, tiny,
                                                                     count, meter):
    """The runtime replays an annotation; content tokens are counted by walking its ids:
    everything but control tokens and the topic text between a promise's two tokens."""
    from solm.core.systems.pasta import PastaVocab
    from solm.decode.pasta.runtime import PastaRuntime

    vocab = PastaVocab.from_tokenizer(pasta_tokenizer)
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=1024)
    prompt = text_ids(pasta_tokenizer, "User: give me some tips\nAssistant:")
    checked = 0
    for response in [LIST, *responses()[:400]]:
        ann, n = annotate_rules(response, count, shape=RuleShape.speed(), gain_of=meter)
        if not n:
            continue
        ids = text_ids(pasta_tokenizer, ann)
        content, in_topic = 0, False
        for t in ids:
            if t == vocab.promise_open:
                in_topic = True
            elif t in vocab.close_tens:
                in_topic = False
            elif t not in vocab.control_ids and not in_topic:
                content += 1
        passes = rt.replay(prompt, ids).forward_passes
        assert meter(ann) == pytest.approx(content / passes, rel=1e-9)
        checked += 1
        if checked == 6:
            break
    assert checked == 6
    assert meter(None) == 1.0


def test_gain_summary_by_hand():
    gains = [1.0, 2.0, 1.5, 1.3, 0.8]
    s = gain_summary(gains)
    assert s["geomean_gain"] == pytest.approx(math.prod(gains) ** (1 / 5), abs=1e-4)
    assert s["median_gain"] == 1.3
    assert (s["rows_gain_at_least_1.3"], s["rows_gain_at_least_1.5"]) == (3, 2)


def rows_file(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_the_mix_keeps_rows_by_gain_and_never_an_evaluation_prompt(tmp_path, meter):
    ann, _ = annotate_rules(LIST, lambda s: len(s.split()), min_chunk_tokens=3)
    rows = [{"id": "a", "prompt": "Tips?", "annotated": "x", "promises": 2, "gain": 1.6},
            {"id": "b", "prompt": "More tips?", "annotated": "x", "promises": 3, "gain": 1.2},
            {"id": "c", "prompt": "What is  the Capital\nof France?", "annotated": "x",
             "promises": 2, "gain": 2.0},
            {"id": "d", "prompt": "Plain", "annotated": None, "promises": 0},
            {"id": "e", "prompt": "One fork", "annotated": "x", "promises": 1, "gain": 1.9},
            {"id": "f", "prompt": "No gain field", "annotated": ann, "promises": 3},
            {"id": "g", "prompt": "Plain too", "annotated": None, "promises": 0}]
    path = rows_file(tmp_path / "ann.jsonl", rows)
    mix = sft_mix([path], min_promises=2, plain=1, min_gain=1.5, gain_of=meter,
                  exclude=["what is the capital of france?"])
    kept = [r["id"] for r in mix.rows]
    want_f = meter(ann) >= 1.5
    assert kept == ["a", *(["f"] if want_f else []), "d"]
    assert (mix.excluded, mix.below_gain) == (1, 1 + (not want_f))
    assert prompt_key(" What IS the capital of\tFrance? ") == prompt_key(rows[2]["prompt"])
    # no gain field and no meter: the error names the file, line and field
    with pytest.raises(DataError) as e:
        sft_mix([path], min_gain=1.5)
    assert "ann.jsonl:6 [field 'gain']" in str(e.value)


def test_stats_of_an_annotated_file_sum_its_rows_gains(tmp_path, meter):
    rows = [{"id": str(i), "prompt": "p", "annotated": "x" if n else None, "promises": n,
             "gain": g} for i, (n, g) in enumerate([(2, 1.6), (3, 1.2), (0, 1.0), (1, 1.4)])]
    st = annotation_stats(rows_file(tmp_path / "a.jsonl", rows), meter)
    assert st["rows"] == 4 and st["rows_with_promise"] == 3
    multi = st["gain_of_rows_with_2_promises"]
    assert multi["rows"] == 2 and multi["geomean_gain"] == pytest.approx(math.sqrt(1.6 * 1.2),
                                                                         abs=1e-4)
    assert st["gain_of_all_rows"]["rows_gain_at_least_1.3"] == 2


def test_annotate_speed_then_mix_by_gain_from_the_command_line(tmp_path):
    """`pasta annotate --shape speed` writes each row's gain; `pasta stats` reads an annotated
    file; `pasta mix --min-gain --exclude` leaves out an AlpacaEval-format prompt file's
    prompts and states what it kept."""
    from typer.testing import CliRunner

    from solm.cli import pasta

    source = tmp_path / "src.jsonl"
    source.write_text("".join(json.dumps({"id": f"r{i}", "prompt": p, "response": LIST}) + "\n"
                              for i, p in enumerate(["Give tips.", "Any advice?", "Hello"])))
    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"instruction": "any   ADVICE?", "output": "x"}) + "\n")
    ann, mixed = tmp_path / "ann.jsonl", tmp_path / "mix.jsonl"
    r = CliRunner().invoke(pasta.app, ["annotate", "-i", str(source), "-o", str(ann),
                                       "--shape", "speed", "-q"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in ann.read_text().splitlines()]
    assert all(row["promises"] == 2 and row["gain"] > 1.0 for row in rows)
    r = CliRunner().invoke(pasta.app, ["stats", str(ann), "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[str(ann)]["gain_of_rows_with_2_promises"]["rows"] == 3
    r = CliRunner().invoke(pasta.app, ["mix", str(ann), "--min-gain", "1.01", "--plain", "0",
                                       "--exclude", str(evals), "-o", str(mixed), "-q"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert [json.loads(x)["id"] for x in mixed.read_text().splitlines()] == ["r0", "r2"]
    assert summary["excluded_eval_prompts"] == 1 and summary["plain_rows_added"] == 0
    assert summary["longest_row_tokens"] > 40


def test_no_evaluation_prompt_is_held_out_and_selection_never_meets_the_final_set(tmp_path):
    """The held-out prompts of the preference rounds leave out evaluation prompts
    (bench/heldout_prompts.py --exclude), and `pasta eval run --limit 30` (choosing a recipe)
    and `--skip 30 --limit 64` (the final measurement) share no prompt: the final set is the
    64 instructions after the first 30, in file order."""
    import subprocess
    import sys
    from pathlib import Path

    from solm.eval.run import alpaca_eval_records

    root = Path(__file__).resolve().parents[1]
    prompts = tmp_path / "dolly.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"d{i}", "prompt": p, "response": "ok"}) + "\n"
                               for i, p in enumerate(["Name a fruit.", "What is  LOVE?",
                                                      "Say hi.", "Count to 3."])))
    trained = rows_file(tmp_path / "trained.jsonl", [{"id": "d0", "promises": 0}])
    alpaca = tmp_path / "alpaca.jsonl"
    alpaca.write_text("".join(json.dumps({"instruction": f"instruction {i}"}) + "\n"
                              for i in range(100)) + json.dumps({"instruction": "what is love?"})
                      + "\n")
    out = tmp_path / "heldout.jsonl"
    r = subprocess.run([sys.executable, str(root / "bench" / "heldout_prompts.py"), "--prompts",
                        str(prompts), "--trained", trained, "--n", "2", "--exclude", str(alpaca),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["d2", "d3"]
    select = alpaca_eval_records(str(alpaca), 30)
    final = alpaca_eval_records(str(alpaca), 64, skip=30)
    assert [i for i, _ in select] == list(range(30)) and [i for i, _ in final] == list(
        range(30, 94))
    assert not {rec.prompt for _, rec in select} & {rec.prompt for _, rec in final}
