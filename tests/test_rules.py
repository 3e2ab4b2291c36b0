import os

from conftest import SAMPLE, shared_path
from solm.annotate.pipeline import annotate_rules_job
from solm.annotate.rules import annotate_rules, split_units, tens_for
from solm.core.jsonl import read_jsonl
from solm.core.pasta_lang import parse, promises, strip, validate
from solm.core.records import Record, load_records

words = lambda s: len(s.split())  # noqa: E731


def test_list_items_keep_marker_and_title_in_main_thread():
    text = ("Here are tips:\n\n1. Sleep well - Aim for seven to nine hours every night and keep a "
            "regular schedule.\n2. Move daily: A brisk walk of thirty minutes counts as good "
            "exercise for most people.\n\nThat is all.")
    ann, n = annotate_rules(text, words, min_chunk_tokens=5)
    assert n == 2 and strip(ann) == text and not validate(ann)
    ps = promises(ann)
    assert ps[0].body.startswith(" Aim for") and ps[1].body.startswith(" A brisk")
    assert ps[0].topic == "Sleep well" and ps[0].tens == tens_for(words(ps[0].body))
    # text after the list waits for the blocks
    assert ann.index("<sync/>") < ann.index("That is all.")


def test_paragraph_first_sentence_stays_in_main():
    text = ("Coffee has a long history. It spread from Ethiopia to Yemen and then across the "
            "Ottoman Empire, reaching Europe in the seventeenth century.")
    ann, n = annotate_rules(text, words, min_chunk_tokens=5)
    assert n == 1 and ann.startswith("Coffee has a long history.<promise")
    assert ann.endswith("</async><sync/>")


def test_nothing_to_parallelise_passes_through():
    assert annotate_rules("Paris.", words) == ("Paris.", 0)
    code = "```python\nprint(1)\n```\n"
    assert annotate_rules(code, words) == (code, 0)


def test_empty_list_item_does_not_crash():
    text = "1. First point with enough words to fork it off.\n2. Second point here.\n4. \n5. Last"
    ann, _ = annotate_rules(text, words, min_chunk_tokens=3)
    assert strip(ann) == text


def test_units_cover_the_text_exactly():
    text = "# Title\n\nPara one.\n\n- a\n  continued\n- b\n\n| x | y |\n|---|---|\n\n```\ncode\n```"
    assert "".join(u.text for u in split_units(text)) == text


def test_faithful_on_every_real_response(tmp_path):
    """The committed sample always; every shared response too where ../shared is present."""
    shared = [shared_path("alpaca_eval", "outputs_gpt4_1106_preview.jsonl"),
              shared_path("instruct", "dolly_5k.jsonl"),
              shared_path("instruct", "openorca_gpt4_284.jsonl")]
    present = [p for p in shared if os.path.exists(p)]
    sources = [SAMPLE, *present]
    annotated = 0
    for src in sources:
        for rec in load_records(src):
            if not rec.response:
                continue
            ann, n = annotate_rules(rec.response, words)
            assert strip(ann) == rec.response, rec.id
            if n:
                parse(ann)
                annotated += 1
    assert annotated > (1000 if len(present) == len(shared) else 100)


def test_job_counts_annotated_plain_and_skips_done(tmp_path):
    recs = [Record("a", "q", "Intro. " + "word " * 30 + "more. " + "x " * 20),
            Record("b", "q", "Short."), Record("c", "q", None)]
    out, rej = tmp_path / "o.jsonl", tmp_path / "r.jsonl"
    s = annotate_rules_job(recs, out, rej, words)
    assert (s.annotated, s.unannotated, s.no_response) == (1, 1, 1)
    rows = list(read_jsonl(out))
    assert rows[1]["annotated"] is None and rows[0]["promises"] == 1
    s2 = annotate_rules_job(recs, out, rej, words)
    assert s2.skipped_done == 3 and len(list(read_jsonl(out))) == 2


def test_a_promise_is_the_smallest_span_of_tens_that_holds_its_block():
    from solm.core.control_tokens import MAX_PROMISE_TENS

    for n in range(1, 10 * MAX_PROMISE_TENS + 1):
        t = tens_for(n)
        assert 10 * (t - 1) < n <= 10 * t  # holds it, and one ten fewer would not
    assert tens_for(0) == 1 and tens_for(10 * MAX_PROMISE_TENS + 7) == MAX_PROMISE_TENS
