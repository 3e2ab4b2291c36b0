"""TIP annotation: faithful, steps that tile the trace, registers that kill a step only when no
later step refers back to it (checked against the rule written a second way), the job's
resume and rejects, and the LLM path through the fake server."""

import asyncio
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fake_llm_server import FakeLLM
from solm.annotate.tip_job import annotate_tip_rules_job
from solm.annotate.tip_prompt import (check_tip_annotation, tip_demonstrations,
                                      tip_system_prompt, tip_task)
from solm.annotate.tip_rules import (NotAnnotatable, annotate_tip_rules, split_steps,
                                     strip_registers, tip_faithful)
from solm.annotate.tip_traces import build_traces
from solm.core.jsonl import read_jsonl
from solm.core.records import Record


def words(s: str) -> int:
    return len(s.split())


SENTENCES = ["Let $x$ be the width.", "The length is 12.", "So the area is $12x$.",
             "We know $x + 3 = 7$, so $x = 4$.", "The perimeter is 2(12 + 4) = 32.",
             "Check: 32 is even.", "Mr. Smith agrees.", "Hence the answer is $\\boxed{48}$.",
             "A short one.", "Note that $\\frac{1}{2}$ of 10 is 5.\n",
             "\\begin{align*}\na &= 2. \\\\\nb &= 3.\n\\end{align*}",
             "Add 1 to each side.", "Start again from 0 and add 1.", "The sum is 9.",
             "Keep the sum in mind."]


def names_oracle(text: str) -> set[str]:
    """Named quantities by walking whitespace tokens: a word of 4+ letters, then `=` or `is`,
    then a number (maybe after `$`)."""
    toks = text.split()
    return {toks[i].lower() for i in range(len(toks) - 2)
            if toks[i].isalpha() and len(toks[i]) >= 4 and toks[i + 1] in ("=", "is")
            and toks[i + 2].lstrip("$-")[:1].isdigit()}


def keys_oracle(step: str, names: set[str]) -> set[str]:
    """The refer-back keys, written a second way: numbers (not 0/1) by scanning tokens, maths
    letters by walking $...$ spans by hand, names by word."""
    words_in = {w.strip(".,;:$()").lower() for w in step.split()}
    keys = {"@" + n for n in names if n in words_in}
    for raw in re.findall(r"[\d][\d,.]*", step):
        num = raw.rstrip(".,").replace(",", "")
        if num and num not in ("0", "1"):
            keys.add("#" + num)
    inside, buf = False, ""
    for ch in step.replace("\\begin{align*}", "$").replace("\\end{align*}", "$"):
        if ch == "$":
            if inside:
                for i, c in enumerate(buf):
                    if c.isalpha() and (i == 0 or not (buf[i - 1].isalpha() or buf[i - 1] == "\\")) \
                            and (i + 1 == len(buf) or not buf[i + 1].isalpha()):
                        keys.add("$" + c)
            inside, buf = not inside, ""
        elif inside:
            buf += ch
    return keys


def refers_back(steps: list[str]) -> dict[int, set[int]]:
    """j -> the earlier steps it needs: i shares a key with j and no step between holds it."""
    names = names_oracle("".join(steps))
    keys = [keys_oracle(s, names) for s in steps]
    out = {}
    for j in range(len(steps)):
        out[j] = {i for i in range(j) for k in keys[i] & keys[j]
                  if not any(k in keys[m] for m in range(i + 1, j))}
    return out


def parse(annotated: str) -> tuple[list[int], list[str]]:
    parts = re.split(r"<reg_(\d+)>", annotated)
    assert parts[0] == ""
    return [int(r) for r in parts[1::2]], parts[2::2]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=14),
       st.sampled_from([" ", "  ", "\n", "\n\n"]), st.integers(1, 4), st.integers(1, 12))
def test_annotation_is_faithful_and_kills_only_what_no_later_step_needs(sentences, sep,
                                                                        registers, min_step):
    text = sep.join(sentences)
    a = annotate_tip_rules(text, words, registers, min_step)
    assert tip_faithful(a.annotated, text) and strip_registers(a.annotated) == text
    regs, steps = parse(a.annotated)
    assert "".join(steps) == text and len(steps) == a.steps
    assert all(0 <= r < registers for r in regs)
    assert all(words(s) >= min_step for s in steps[:-1]) or len(steps) == 1
    # replay the registers: which step each opening kills, and whether a later step needed it
    needs = refers_back(steps)
    holder, killed, forced = {}, 0, 0
    for j, r in enumerate(regs):
        if r in holder:
            victim = holder[r]
            killed += 1
            still_needed = any(victim in needs[k] for k in range(j, len(steps)))
            forced += still_needed
            if still_needed:  # only when every register held a needed step
                assert all(any(h in needs[k] for k in range(j, len(steps)))
                           for h in holder.values())
        holder[r] = j
    assert (killed, forced) == (a.killed, a.forced)
    if registers >= len(steps):
        assert killed == 0
    assert regs == registers_oracle(needs, len(steps), registers)


def registers_oracle(needs: dict[int, set[int]], n: int, registers: int) -> list[int]:
    """The register choice written per step: an unused register first (lowest number); else
    among registers whose step no later step needs (all of them if none), the one whose step
    was opened or last referred back to longest ago (on a tie, the one holding the older
    step)."""
    def needed_after(i: int, j: int) -> bool:
        return any(i in needs[k] for k in range(j, n))

    def last_use(i: int, j: int) -> int:
        return max([i] + [k for k in range(i + 1, j + 1) if i in needs[k]])

    holder: dict[int, int] = {}
    out = []
    for j in range(n):
        unused = sorted(set(range(registers)) - set(holder))
        if unused:
            reg = unused[0]
        else:
            free = [r for r, i in holder.items() if not needed_after(i, j)]
            reg = min(free or holder, key=lambda r: (last_use(holder[r], j), holder[r]))
        holder[reg] = j
        out.append(reg)
    return out


def test_zero_and_one_tie_no_steps_together():
    # s0 holds 12 (read again by s3); s1 and s2 share only 1 and 0, so s2 needs nothing:
    # s1's register is free at s2 (and s2's at s3), s0's never is -> [0, 1, 1, 1], no forced
    # kill. Were 0/1 keys, s2 would need s1, both registers would hold needed steps at s2,
    # and s2 would kill s0 (forced).
    text = "Take 12 apples. Add 1 and 0 now. Again add 1 and 0. Eat 12 here."
    a = annotate_tip_rules(text, words, registers=2, min_step_tokens=3)
    regs, parts = parse(a.annotated)
    assert len(parts) == 4
    assert regs == [0, 1, 1, 1] and a.forced == 0


def test_enough_free_registers_go_least_recently_used_first():
    # s0 introduces 12, s1 introduces 7, s2 refers back to s0 (used at 2), s3 has no key:
    # at s3 all three registers hold steps no longer needed; s1 (last used at 1) goes first
    steps = "Take 12 apples. Take 7 pears. Eat 12 now. Then rest a bit."
    a = annotate_tip_rules(steps, words, registers=3, min_step_tokens=3)
    regs, parts = parse(a.annotated)
    assert len(parts) == 4 and regs == [0, 1, 2, 1]
    assert (a.killed, a.forced) == (1, 0)
    # with two registers s2 cannot take s0's (s2 needs it) and takes s1's, which is free
    a = annotate_tip_rules(steps, words, registers=2, min_step_tokens=3)
    assert parse(a.annotated)[0][:3] == [0, 1, 1] and a.forced == 0


def test_no_split_inside_maths_or_after_an_abbreviation():
    text = "Let $x. y$ be given. Mr. Lee says \\[a. b\\] holds. Done now."
    steps = split_steps(text, words, 1)
    assert "".join(steps) == text
    assert steps == ["Let $x. y$ be given. ", "Mr. Lee says \\[a. b\\] holds. ", "Done now."]


def test_malformed_traces_are_refused():
    with pytest.raises(NotAnnotatable, match="register_text"):
        annotate_tip_rules("Use <reg_3> here.", words)
    with pytest.raises(NotAnnotatable, match="empty"):
        annotate_tip_rules("  \n", words)


def test_the_job_resumes_and_rejects_with_reasons(tmp_path):
    recs = [Record(f"r{i}", f"q{i}", "Take 12. Then 7. So 19. Also 5 and 19 give 24.")
            for i in range(6)]
    recs[2] = Record("r2", "q2", "")
    recs[4] = Record("r4", "q4", "Already <reg_0> tagged.")
    out, rej = tmp_path / "out.jsonl", tmp_path / "rej.jsonl"
    first = annotate_tip_rules_job(recs[:3], out, rej, words, registers=2, min_step_tokens=2)
    assert (first.annotated, first.rejected) == (2, {"empty": 1})
    again = annotate_tip_rules_job(recs, out, rej, words, registers=2, min_step_tokens=2)
    assert again.skipped_done == 3 and again.annotated == 2
    assert again.rejected == {"register_text": 1}
    rows = list(read_jsonl(out))
    assert sorted(r["id"] for r in rows) == ["r0", "r1", "r3", "r5"]
    assert all(tip_faithful(r["annotated"], r["response"]) and r["killed"] > 0 for r in rows)
    assert sorted(r["reason"] for r in read_jsonl(rej)) == ["empty", "register_text"]


def test_demonstrations_pass_the_check_and_fit_the_registers():
    for d in tip_demonstrations():
        fields = check_tip_annotation(d.annotated, d.response, 4)
        assert fields["killed"] >= 1  # every demonstration shows a reuse
    assert "Example 5" in tip_system_prompt(4) and "Example 5" not in tip_system_prompt(2)
    assert "<reg_1>" in tip_system_prompt(2) and "The model has 2 registers" in tip_system_prompt(2)
    with pytest.raises(ValueError, match="at least 2 registers"):
        tip_system_prompt(1)


@pytest.mark.parametrize("bad,reason", [("<reg_0>Take 12. <reg_5>Then 7.", "beyond"),
                                        ("Take 12. <reg_0>Then 7.", "open with"),
                                        ("<reg_0>Take 12.<reg_1><reg_0> Then 7.", "empty step"),
                                        ("<reg_0>Take 13. <reg_1>Then 7.", "unfaithful")])
def test_bad_llm_annotations_are_rejected(bad, reason):
    from solm.annotate.llm_job import Rejection

    with pytest.raises(Rejection, match=reason):
        check_tip_annotation(bad, "Take 12. Then 7.", 2)


def test_llm_annotation_through_the_fake_server(tmp_path):
    from solm.annotate.llm_job import LLMAnnotateConfig, annotate_with_llm
    from solm.core.llm import make_client

    text = "Take 12 apples. Take 7 pears. Eat 12 now. Then rest a bit. Sum 7 and 5."
    recs = [Record(f"r{i}", f"q{i}", text) for i in range(4)]
    recs[3] = Record("r3", "q3", text + " UNFAITHFUL")
    out, rej = tmp_path / "o.jsonl", tmp_path / "r.jsonl"
    with FakeLLM(words, unfaithful_marker="UNFAITHFUL") as server:
        client = make_client(f"openai:fake@{server.url}/v1", timeout=10)
        summary = asyncio.run(annotate_with_llm(recs, client, out, rej, words,
                                                LLMAnnotateConfig(max_tries=2),
                                                task=tip_task(2)))
    assert summary.accepted == 3 and summary.rejected == {"unfaithful": 1}
    for row in read_jsonl(out):
        assert tip_faithful(row["annotated"], text) and row["registers"] == 2
        assert row["prompt_version"].startswith("tip-v1-r2-") and row["killed"] >= 1


def test_tip_annotate_cli_writes_rows_and_a_manifest(tmp_path):
    from solm.cli import tip

    src = tmp_path / "math.jsonl"
    src.write_text("".join(json.dumps({"id": f"m{i}", "problem": f"P{i}", "solution":
                                       "Take 12 apples. Take 7 pears. Eat 12 now. Then rest."})
                           + "\n" for i in range(3)))
    out = tmp_path / "ann.jsonl"
    r = CliRunner().invoke(tip.app, ["annotate", "-i", str(src), "-o", str(out), "--registers",
                                     "2", "--min-step-tokens", "3", "--quiet"])
    assert r.exit_code == 0, r.output
    rows = list(read_jsonl(out))
    assert len(rows) == 3 and all(tip_faithful(x["annotated"], x["response"]) for x in rows)
    assert json.loads(r.stdout)["reuse_share"] == 1.0
    assert (tmp_path / "ann.jsonl.manifest.json").exists()


def test_bench_traces_are_rules_annotations_of_concatenated_solutions():
    sol = "Take 12 apples. Take 7 pears. Eat 12 now. Then rest a bit."
    rows = build_traces(iter([("q", sol)] * 50), words, n_traces=2, min_tokens=40,
                        registers=3, min_step_tokens=3)
    assert len(rows) == 2
    for r in rows:
        text = strip_registers(r["response"])
        assert words(text) >= 40 and text.count(sol) == len(text.split("\n\n")) - 1
        regs, _ = parse(r["response"])
        assert max(regs) < 3 and r["killed"] > 0


def test_a_refer_back_to_a_dead_step_does_not_refresh_its_registers_new_holder():
    # two registers: s2 reads 7 from s1, and must kill a needed step (forced): s0 (needed by
    # s4) on register 0, used longest ago. s3 needs nothing: both steps held are free and
    # were last used at 2, so the older one (s1, register 1) dies. s4 reads 9 from s0, which
    # is dead: that read must not count as a use of register 0 (now s2's, last used at 2),
    # so s4 takes register 0; counting it would make register 0 "used at 4" and send s4 to
    # register 1, killing s3.
    text = "Sell 9 here. Eat 7 apples. Eat 7 figs. Add 5 apples. Add 9 pears."
    a = annotate_tip_rules(text, words, registers=2, min_step_tokens=3)
    regs, parts = parse(a.annotated)
    assert len(parts) == 5
    assert regs == [0, 1, 0, 1, 0] and (a.killed, a.forced) == (3, 1)


def test_a_name_has_four_letters_or_more():
    # `sum is 9` names nothing (three letters: too common to tie steps together)
    assert names_oracle("The sum is 9 and the total is 4 and rate = 2.") == {"total", "rate"}
    from solm.annotate.tip_rules import named_quantities
    assert named_quantities("The sum is 9 and the total is 4 and rate = 2.") == {"total", "rate"}


def test_thousands_separators_do_not_hide_a_refer_back():
    """`1,000` and `1000` are the same number: the later step reads the earlier one (its
    register is not free), so with two registers the third step takes the second's."""
    from solm.annotate.tip_rules import needed_until, step_keys

    assert "#1000" in step_keys("We have 1,000 coins.", set())
    steps = ["We have 1,000 coins. ", "Then add 7 more. ", "So 1000 remain."]
    needed, refers = needed_until(steps)
    assert refers[2] == [0] and needed[0] == 2


def test_a_variable_set_outside_maths_is_a_key_even_at_zero_or_one():
    """`a=0` in plain text keys `$a` as `$a$` would: a step restating the variables refers
    back to the last step that set them, though 0 and 1 are no keys as numbers."""
    from solm.annotate.tip_rules import needed_until, step_keys

    assert {"$a", "$b"} <= step_keys("so a=0, b = 1.", set())
    assert "$a" not in step_keys("so a == b.", set()) and "$x" in step_keys("$x$ grows", set())
    steps = ["Start with a=0, b=1. ", "Now a=1, b=0. ", "Then a=0, b=0. "]
    needed, refers = needed_until(steps)
    assert refers == [[], [0], [1]] and needed == [1, 2, 2]
