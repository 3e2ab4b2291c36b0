"""Own-answer rows (`pasta distill`): what is dropped, what is kept, and that every kept row
strips back to the answer the model sampled, checked against the rules written a second way."""

import re

import pytest

from conftest import PARAGRAPHS

from solm.prefs.distill_job import answer_judge
from solm.annotate.own_answers import (CUT, EMPTY, REPEATING, UNFAITHFUL, Candidate,
                                       OwnAnswerRules, own_mix)
from solm.core.chat import text_ids
from solm.core.control_tokens import ASYNC_CLOSE, ASYNC_OPEN, PROMISE_OPEN, SYNC
from solm.core.pasta_lang import strip

LIST_ANSWER = ("Here are some tips for a good night's sleep:\n\n"
               "1. Keep a schedule: go to bed and wake up at the same time every day, even on "
               "weekends, so that your body learns when it is time to rest.\n"
               "2. Make the room dark: heavy curtains or a sleep mask block the light that "
               "keeps the brain awake, and a cool room helps as well.\n"
               "3. Avoid screens: phones and laptops give off blue light, so put them away "
               "an hour before bed and read a paper book instead.\n"
               "4. Watch what you drink: coffee, tea and cola in the afternoon keep many "
               "people awake, and alcohol makes sleep lighter later in the night.\n")
CLOSER = re.compile(r'^" tokens="\d+"/>$')


def content_by_token_text(ids, tok):
    """The answer tokens of an annotated sequence read from each token's text: drop the four
    tags, every closer, and the topic between `<promise topic="` and its closer."""
    out, in_topic = [], False
    for t, text in zip(ids, tok.convert_ids_to_tokens(ids)):
        if text == PROMPT_OPEN_TEXT:
            in_topic = True
        elif CLOSER.match(text):
            in_topic = False
        elif text in (ASYNC_OPEN, ASYNC_CLOSE, SYNC) or in_topic:
            continue
        else:
            out.append(t)
    return out


PROMPT_OPEN_TEXT = PROMISE_OPEN


def answer(tok, text, sample=0, ended=True, ids=None):
    return {"id": "p1", "sample": sample, "response": text,
            "ids": ids if ids is not None else text_ids(tok, text), "ended": ended, "flags": []}


@pytest.fixture(scope="module")
def judge(pasta_tokenizer):
    return answer_judge(pasta_tokenizer, OwnAnswerRules())


def test_a_list_answer_is_annotated_and_strips_back_to_its_sampled_tokens(pasta_tokenizer,
                                                                          judge):
    a = answer(pasta_tokenizer, LIST_ANSWER)
    c = judge(a)
    assert c.dropped is None and c.promises >= 2 and c.gain > 1.3
    assert strip(c.annotated) == LIST_ANSWER
    ids = text_ids(pasta_tokenizer, c.annotated)
    assert content_by_token_text(ids, pasta_tokenizer) == a["ids"]


def test_an_answer_in_paragraphs_forks_them_together_unless_told_apart(pasta_tokenizer):
    """The base model answers in paragraphs: by default its paragraphs fork in one group (a
    parallel row whose content, read token by token, is the sampled answer); apart, a lone
    paragraph fork never pays and the answer is plain."""
    row = answer(pasta_tokenizer, PARAGRAPHS)
    together = answer_judge(pasta_tokenizer, OwnAnswerRules())(row)
    assert together.dropped is None and together.promises == 3 and together.gain >= 1.3
    ids = text_ids(pasta_tokenizer, together.annotated)
    assert content_by_token_text(ids, pasta_tokenizer) == row["ids"]
    apart = answer_judge(pasta_tokenizer, OwnAnswerRules(paragraphs_together=False))(row)
    assert apart.dropped is None and apart.promises == 0 and apart.annotated is None


def test_answers_that_cannot_be_rows_are_dropped_with_their_reason(pasta_tokenizer, judge):
    tok = pasta_tokenizer
    assert judge(answer(tok, LIST_ANSWER, ended=False)).dropped == CUT
    assert judge(answer(tok, "  ", ids=[])).dropped == EMPTY
    loop = "I like the sea. " * 12
    assert judge(answer(tok, loop)).dropped == REPEATING
    # the same text sampled in other pieces than the tokenizer's: nothing to train on
    ids = text_ids(tok, LIST_ANSWER)
    word = next(i for i, t in enumerate(tok.convert_ids_to_tokens(ids)) if len(t) >= 6)
    pieces = text_ids(tok, tok.convert_tokens_to_string([tok.convert_ids_to_tokens(ids[word])
                                                         [:3]])) + text_ids(
        tok, tok.convert_tokens_to_string([tok.convert_ids_to_tokens(ids[word])[3:]]))
    odd = ids[:word] + pieces + ids[word + 1:]
    assert tok.decode(odd) == LIST_ANSWER and odd != ids
    assert judge(answer(tok, LIST_ANSWER, ids=odd)).dropped == UNFAITHFUL


def test_the_repetition_threshold_is_the_share_of_repeated_3grams(pasta_tokenizer):
    tok = pasta_tokenizer
    # 10 tokens a b c d e f g a b c: 8 trigrams, one (a b c) repeats: 12.5%
    ids = [1000, 1001, 1002, 1003, 1004, 1005, 1006, 1000, 1001, 1002]
    row = {"id": "p", "sample": 0, "response": tok.decode(ids), "ids": ids, "ended": True}
    strict = answer_judge(tok, OwnAnswerRules(max_repeated_3grams=0.12))
    lenient = answer_judge(tok, OwnAnswerRules(max_repeated_3grams=0.125))
    assert strict(row).dropped == REPEATING and lenient(row).dropped != REPEATING


def cand(pid, sample, gain, dropped=None, plain=True):
    return Candidate(pid, sample, f"{pid}-{sample}", dropped=dropped,
                     annotated="x" if gain > 1 else None, promises=2 if gain > 1 else 0,
                     gain=gain, plain_faithful=plain)


def test_the_mix_takes_each_prompts_best_parallel_answer_and_plain_rows_beside():
    prompts = [
        [cand("a", 0, 1.2), cand("a", 1, 1.6)],  # the sampled answer pays
        [cand("b", 0, 1.5), cand("b", 1, 1.5)],  # a tie: the greedy one
        [cand("c", 0, 1.0), cand("c", 1, 1.1)],  # nothing pays: plain (greedy)
        [cand("d", 0, 2.0, dropped=CUT), cand("d", 1, 1.0)],  # the paying one was cut
        [cand("e", 0, 1.0, dropped=CUT), cand("e", 1, 1.0, dropped=REPEATING)],  # nothing
        [cand("f", 0, 1.0, plain=False), cand("f", 1, 1.0)],  # greedy text unfaithful
        [cand("g", 0, 1.4)],
        [cand("h", 0, 1.0)],
    ]
    mix = own_mix(prompts, OwnAnswerRules(min_gain=1.3, plain_share=0.4))
    assert [(c.id, c.sample) for c in mix.parallel] == [("a", 1), ("b", 0), ("g", 0)]
    # 3 parallel rows: 0.4 / 0.6 x 3 = 2 plain rows, in prompt order
    assert mix.plain_offered == 4
    assert [(c.id, c.sample) for c in mix.plain] == [("c", 0), ("d", 1)]
    rows = mix.rows({p: {"prompt": f"P {p}"} for p in "abcdefgh"})
    assert [r["kind"] for r in rows] == ["parallel"] * 3 + ["plain"] * 2
    assert all(r["annotated"] is None for r in rows[3:])
    half = own_mix(prompts, OwnAnswerRules(plain_share=0.5))
    assert len(half.plain) == 3


def test_rules_refuse_settings_that_mean_nothing():
    with pytest.raises(ValueError):
        OwnAnswerRules(plain_share=1.0)
    with pytest.raises(ValueError):
        OwnAnswerRules(min_gain=1.0)


def test_distill_answers_resumes_and_leaves_evaluation_prompts_out(tmp_path, tiny_folder):
    """The command on a tiny random model: greedy + sampled answers per prompt (a prompt's
    answers differ where sampled), an excluded prompt and one whose first line --match does
    not find never answered, every answer judged,
    a rerun decodes nothing, and a rerun with other settings is refused."""
    import json

    from typer.testing import CliRunner

    from solm.cli import pasta as pasta_app

    prompts = tmp_path / "train.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Name {i} colours."}) + "\n"
                               for i in range(4)) +
                       json.dumps({"id": "q4", "prompt": "Say no more.\n\nName them."}) + "\n")
    evaluation = tmp_path / "eval.jsonl"
    evaluation.write_text(json.dumps({"id": "e", "prompt": "  name 2 COLOURS. "}) + "\n")
    out = tmp_path / "own"

    def distill(*extra):
        r = CliRunner().invoke(pasta_app.app, [
            "distill", "-p", str(prompts), "--exclude", str(evaluation), "-o", str(out),
            "-m", tiny_folder, "--engine", "torch", "--max-new-tokens", "6", "--sampled", "2",
            "--temperature", "1.5", "--dtype", "fp32", "--batch-size", "4", "-q",
            "--match", r"^[^\n]*\bname", *extra])
        return r.exit_code, r.output

    code, output = distill()
    # 6 tokens from a random model: never an ended answer, so nothing to train on: the run
    # keeps what it judged, says why in its last line, and exits non-zero
    assert code == 1, output[-3000:]
    assert "0 rows" in output and "9 cut" in output and "--max-new-tokens" in output
    answers = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    assert sorted({a["id"] for a in answers}) == ["q0", "q1", "q3"]
    assert sorted((a["id"], a["sample"]) for a in answers) == [
        (q, k) for q in ("q0", "q1", "q3") for k in range(3)]
    for a in answers:  # the tokens sampled are the text kept
        assert a["response"] == pasta_tokenizer_free_decode(tiny_folder, a["ids"])
    assert any(len({tuple(a["ids"]) for a in answers if a["id"] == q}) > 1
               for q in ("q0", "q1", "q3"))
    candidates = (out / "candidates.jsonl").read_text().splitlines()
    summary = json.loads((out / "summary.json").read_text())
    assert len(candidates) == 9 == summary["answers"] and summary["excluded"] == 1
    assert summary["dropped"]["cut"] + summary["dropped"]["empty"] == 9
    assert (out / "rows.jsonl").read_text() == ""
    code, output = distill()
    assert code == 1 and json.loads((out / "summary.json").read_text())[
        "answers_decoded_now"] == 0
    code, output = distill("--seed", "3")
    assert code == 1 and "--restart" in output
    code, output = distill("--match", "(")
    assert code == 2 and "--match" in output and "regular expression" in output


def pasta_tokenizer_free_decode(folder, ids):
    from solm.core.models import load_tokenizer

    return load_tokenizer(folder).decode(ids, skip_special_tokens=True)


@pytest.fixture(scope="module")
def lively_folder(tmp_path_factory):
    """A tiny random llama whose weights are all N(0, 0.25): its greedy answers vary token by
    token (the default initialisation writes one newline after another), and repeat a token
    of its first 6 at the 11th under no repetition penalty."""
    import torch

    from solm.core.models import load_tokenizer, tiny_model

    tok = load_tokenizer("smollm2-135m")
    model, _ = tiny_model(tok, seed=3)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    folder = tmp_path_factory.mktemp("lively")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def test_a_larger_cap_continues_the_cut_answers_as_one_decode_would(tmp_path, lively_folder):
    """Answers cut at 6 tokens, rerun at 12: each keeps its 6 tokens and goes on; the greedy
    one equals a fresh greedy decode at 12 (so the repetition penalty counted the tokens
    written before the rerun); the rows read are the continued ones; a smaller cap is
    refused. A random model rarely ends, so the answers are cut at each cap."""
    import json

    tiny_folder = lively_folder
    from typer.testing import CliRunner

    from solm.cli import pasta as pasta_app

    prompts = tmp_path / "train.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Name {i} colours."})
                               + "\n" for i in range(3)))

    def distill(out, cap, *extra):
        r = CliRunner().invoke(pasta_app.app, [
            "distill", "-p", str(prompts), "-o", str(out), "-m", tiny_folder,
            "--engine", "torch", "--max-new-tokens", str(cap), "--sampled", "1",
            "--temperature", "1.5", "--repetition-penalty", "1.5", "--dtype", "fp32",
            "--batch-size", "4", "-q", *extra])
        return r.exit_code, r.output

    def last_rows(out):
        rows = {}
        for line in (out / "answers.jsonl").read_text().splitlines():
            r = json.loads(line)
            rows[(r["id"], r["sample"])] = r
        return rows

    short, fresh = tmp_path / "short", tmp_path / "fresh"
    # (a random model's cut answers make no rows: each full run exits 1, saying so)
    assert distill(short, 6)[0] == 1
    first = last_rows(short)
    judged = (short / "candidates.jsonl").read_text()
    # --rows-only: the rows of what is there, nothing decoded, the 6 cut answers counted
    code, output = distill(short, 12, "--rows-only")
    assert code == 0, output[-3000:]
    assert last_rows(short) == first and len((short / "answers.jsonl").read_text()
                                             .splitlines()) == 6
    assert (short / "candidates.jsonl").read_text() == judged
    assert json.loads((short / "summary.json").read_text())["answers_left"] == 6
    code, output = distill(short, 12)
    assert code == 1 and "6 cut" in output, output[-3000:]
    continued = last_rows(short)
    assert len((short / "answers.jsonl").read_text().splitlines()) == 12
    assert distill(fresh, 12)[0] == 1
    once = last_rows(fresh)
    assert len(set(once[("q0", 0)]["ids"])) > 6
    for key, row in continued.items():
        assert row["ids"][:6] == first[key]["ids"] and len(row["ids"]) == 12
        assert row["continued_from"] == 6 and not row["ended"]
        assert row["response"] == pasta_tokenizer_free_decode(tiny_folder, row["ids"])
        if key[1] == 0:
            assert row["ids"] == once[key]["ids"]
    # the judge reads the continued rows
    assert len((short / "candidates.jsonl").read_text().splitlines()) == 6
    code, output = distill(short, 8)
    assert code == 1 and "--max-new-tokens" in output and "12" in output


@pytest.mark.parametrize("dropped,annotated,parallel,plain,offered,empty,says", [
    ({"cut": 15, "empty": 0, "repeating": 2, "unfaithful": 0}, 0, 0, 0, 3, True,
     ["0 rows", "15 cut, 2 repeating", "3 plain answers left out", "--max-new-tokens",
      "repetition penalty", "--min-gain"]),
    ({"cut": 0, "empty": 0, "repeating": 0, "unfaithful": 0}, 4, 0, 0, 0, True,
     ["dropped: none", "lower --min-gain"]),
    ({"cut": 1, "empty": 0, "repeating": 0, "unfaithful": 0}, 5, 4, 2, 5, False,
     ["6 rows (4 parallel, 2 plain)", "3 plain answers left out"]),
])
def test_distills_last_line_says_what_was_dropped_and_what_to_change(
        dropped, annotated, parallel, plain, offered, empty, says):
    from solm.prefs.distill_job import DistillSummary, distill_verdict

    summary = DistillSummary(answers=20, dropped=dropped, annotated_answers=annotated,
                             parallel_rows=parallel, plain_rows=plain, plain_offered=offered)
    line, is_empty = distill_verdict(summary)
    assert is_empty == empty
    for phrase in says:
        assert phrase in line, (phrase, line)
    assert ("nothing to train on" in line) == empty
