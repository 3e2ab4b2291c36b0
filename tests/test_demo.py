"""`pasta demo`: the thread timeline is the runtime's schedule drawn faithfully, the
sequential decode is the same answer one token per pass, and the kept model really forks
threads on the demo prompt."""

import json

import pytest

from typer.testing import CliRunner

from solm.core.sampling import SamplingConfig
from solm.decode.pasta.demo import Timeline, run_demo, timeline_rows
from solm.core.systems.pasta_schedule import schedule_steps
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime


def test_timeline_rows_draw_each_step():
    tl = Timeline(steps=[{0}, {0, 1}, {0, 1, 2}, {1}, {0}], topics={1: "a", 2: "b"})
    rows = dict(timeline_rows(tl, width=10))
    assert rows == {"main": "███·█", "thread 1 (a)": " ███ ", "thread 2 (b)": "  █  "}
    squeezed = dict(timeline_rows(tl, width=2))  # 3 steps a column: a mark if any is busy
    assert squeezed == {"main": "██", "thread 1 (a)": "██", "thread 2 (b)": "█ "}


def test_demo_timeline_counts_every_token_fed_and_sequential_is_the_same_text(tiny,
                                                                            pasta_tokenizer):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    cfg = PastaDecodeConfig(max_new_tokens=24, sampling=SamplingConfig(temperature=0.0))
    seen = []
    res = run_demo(rt, "List three colours.", cfg, on_views=seen.append, refresh_s=0.0)
    assert len(res.timeline.steps) == res.decoded.forward_passes
    assert sum(len(s) for s in res.timeline.steps) == res.decoded.tokens_fed
    # the timed parallel side replays the same answer: the same tokens, every one fed
    assert res.parallel.ids == res.decoded.ids
    assert res.parallel.tokens_fed == len(res.decoded.ids)
    assert res.sequential.ids == res.content_ids  # the same answer, tags removed
    assert res.sequential.forward_passes == len(res.content_ids)
    assert res.realized_speedup == res.sequential.decode_s / res.parallel.decode_s
    assert seen and seen[-1][0].tid == 0  # the live view was drawn, main first


def test_at_equal_pass_costs_the_realized_speedup_is_the_theoretical_one(tiny,
                                                                          pasta_tokenizer):
    """The theoretical speedup counts passes the way the two timed decodes do: scripted
    answers whose blocks a cap cuts (the stop adds closers nobody fed), and whole ones, give
    theoretical == sequential passes / parallel passes, so equal per-pass times can never
    print a realized speedup above it (1.74x against 1.71x)."""
    from solm.decode.pasta.demo import DemoResult, Timeline

    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    for cap in (6, 30):
        cfg = PastaDecodeConfig(max_new_tokens=cap, sampling=SamplingConfig(temperature=0.0))
        res = run_demo(rt, "List three colours.", cfg)
        # the timed parallel side takes the schedule's critical path (the thesis' count)
        assert res.parallel.forward_passes == schedule_steps(res.decoded.ids, rt.vocab)
        assert res.theoretical_speedup == (res.sequential.forward_passes
                                           / res.parallel.forward_passes)
        same_cost = DemoResult(
            parallel=_timed(res.parallel, 0.01 * res.parallel.forward_passes),
            sequential=_timed(res.sequential, 0.01 * res.sequential.forward_passes),
            timeline=Timeline(), response="", content_ids=res.content_ids,
            theoretical_speedup=res.theoretical_speedup, views=[])
        assert abs(same_cost.realized_speedup - same_cost.theoretical_speedup) < 1e-9
        assert not same_cost.distrusted
        cold = DemoResult(parallel=_timed(res.parallel, 1.0),
                          sequential=_timed(res.sequential, 1.2 * res.theoretical_speedup),
                          timeline=Timeline(), response="", content_ids=res.content_ids,
                          theoretical_speedup=res.theoretical_speedup, views=[])
        assert cold.distrusted  # 20% above what the passes allow: flagged, not a result


def _timed(result, seconds: float):
    from dataclasses import replace

    return replace(result, decode_s=seconds)


@pytest.mark.slow
def test_make_demo_command_forks_threads_with_the_kept_model(tmp_path):
    from solm.cli import pasta

    out = tmp_path / "demo.json"
    r = CliRunner().invoke(pasta.app, ["demo", "-o", str(out), "--width", "400"])
    assert r.exit_code == 0, r.output
    got = json.loads(out.read_text())
    # the kept model's threads take the Pred-10X layout, which llama.cpp refuses; with nothing
    # measured here `auto` takes the next engine that can run it: onnxruntime, not torch
    assert got["model"] == "pasta-bonbon-cpu" and got["engine"] == "onnxruntime"
    assert got["threads"] >= 2  # the model wrote its own promises and they ran as threads
    assert got["sequential_forward_passes"] == got["answer_tokens"]
    assert got["parallel_forward_passes"] < got["sequential_forward_passes"]
    # content over the answer's critical path, whatever the engine (llama.cpp takes one pass
    # more per <sync/>, paid in the realized figure)
    assert got["theoretical_speedup"] == pytest.approx(
        got["answer_tokens"] / got["critical_path"])
    assert got["critical_path"] <= got["parallel_forward_passes"]
    assert set(got["spread"]) == {"parallel", "sequential", "fastest"} and "unreliable" in got
    marks = sum(bar.count("█") for _, bar in got["timeline"])  # one column per step here
    assert marks == got["decode_tokens_fed"]
    # both sides timed 3 times (after a warm-up), the fastest compared
    assert [len(got["times_s"][k]) for k in ("parallel", "sequential", "fastest")] == [5, 5, 5]
    assert got["realized_speedup"] == pytest.approx(
        min(got["times_s"]["sequential"]) / min(got["times_s"]["parallel"]))
    # and against the fastest sequential decoding here: llama.cpp's own loop, q4_0 unmeasured
    assert got["fastest_sequential"].startswith("llama.cpp's own loop, q4_0 GGUF")
    assert got["realized_vs_fastest"] == pytest.approx(
        min(got["times_s"]["fastest"]) / min(got["times_s"]["parallel"]))
    assert "the fastest sequential decoding here" in " ".join(r.output.split())
    # the answer is whole, or the cut is said above it
    assert "max_new_tokens" not in got["flags"] or "The answer below is cut" in r.output
    assert len(got["timeline"]) == got["threads"] + 1
    assert "realized speedup" in r.output


def test_both_sides_are_warmed_then_timed_in_alternating_order(tiny, pasta_tokenizer):
    """The first `make demo` timed the sequential side cold (realized 4.41x against
    a theoretical 1.71x). Each side is now warmed (two untimed rounds), then timed `repeats`
    times with the order alternating, and the fastest compared."""
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    calls, replay = [], rt.replay

    def spy(prompt, response, mode="parallel", **kw):
        calls.append(mode)
        return replay(prompt, response, mode=mode, **kw)

    rt.replay = spy
    cfg = PastaDecodeConfig(max_new_tokens=12, sampling=SamplingConfig(temperature=0.0))
    res = run_demo(rt, "List three colours.", cfg, repeats=3)
    assert calls == ["parallel", "sequential", "parallel", "sequential",  # warm-up
                     "parallel", "sequential", "sequential", "parallel", "parallel",
                     "sequential"]
    assert res.parallel.decode_s == min(res.times["parallel"])
    assert res.sequential.decode_s == min(res.times["sequential"])


SCRIPT = ('Two tips:\n1.<promise topic="sleep" tokens="1"/><async> Sleep eight hours.</async>'
          '\n2.<promise topic="food" tokens="1"/><async> Eat vegetables.</async><sync/> Done.')


def scripted_runtime(tiny, tok) -> tuple[PastaRuntime, list[int]]:
    """A runtime whose every thread writes its stream of SCRIPT, then main ends (whatever the
    tiny model predicts), and SCRIPT's ids."""
    from solm.core.chat import text_ids
    from solm.decode.pasta.runtime import replay_scripts

    rt = PastaRuntime(tiny, tok, pool_size=512)
    ids = text_ids(tok, SCRIPT)
    streams, _ = replay_scripts(ids, rt.vocab)
    eos = next(iter(rt.vocab.eos))

    def scripted(config):
        def choose(thread, logits, state):
            stream = streams[thread.tid]
            return stream[len(thread.fed)] if len(thread.fed) < len(stream) else eos
        return choose

    rt.chooser = scripted
    return rt, ids


def _hand_counted_passes(ids, vocab) -> int:
    """The schedule written a second way: main feeds one token a pass; a block starts in
    the pass that feeds its promise's closing token and feeds one token a pass from there;
    `<sync/>` goes in no earlier than the pass of its blocks' last tokens; main goes on."""
    from solm.core.systems.pasta import MAIN, walk_training_order

    attrs, _ = walk_training_order(ids, vocab)
    main = [t for t, a in zip(ids, attrs) if a.thread == MAIN]
    blocks = {}
    for t, a in zip(ids, attrs):
        if a.thread != MAIN:
            blocks.setdefault(a.anchor, []).append(t)
    step, ends = 0, []
    for i, tok in enumerate(main):
        step += 1
        if tok == vocab.sync and ends:
            step = max(step, max(ends))
            ends = []
        if i in blocks:  # this token closes a promise: its block's k-th token at step + k
            ends.append(step + len(blocks[i]) - 1)
    return step


def test_the_demos_theoretical_speedup_counts_content_over_the_critical_path(tiny,
                                                                            pasta_tokenizer):
    """A planted bug counted every decoded id (tags included) and no test saw it: a model
    scripted to write an answer with two promises, counted by hand."""
    from solm.core.chat import text_ids
    from solm.core.pasta_lang import strip

    rt, ids = scripted_runtime(tiny, pasta_tokenizer)
    cfg = PastaDecodeConfig(max_new_tokens=200, sampling=SamplingConfig(temperature=0.0))
    res = run_demo(rt, "Two tips?", cfg, repeats=1)
    assert res.decoded.ids == ids and res.decoded.threads == 2
    content = text_ids(pasta_tokenizer, strip(SCRIPT))
    assert res.content_ids == content
    passes = _hand_counted_passes(ids, rt.vocab)
    assert passes < len(ids)  # the blocks really overlap main
    assert res.theoretical_speedup == pytest.approx(len(content) / passes)
    assert res.parallel.forward_passes == passes  # torch takes exactly the critical path
    # the spread of the timed replays and its flag
    assert set(res.spread) == {"parallel", "sequential"}
    res.times = {"parallel": [1.0, 1.5], "sequential": [2.0, 2.1]}
    assert res.unreliable and res.spread["parallel"] == pytest.approx(1.5)
    assert res.warnings()[0].startswith("the timed parallel replays wandered")
    slower = _timed(res.parallel, 2 * res.sequential.decode_s)
    res.parallel = slower
    assert res.warnings()[-1].startswith("the parallel decode was slower")
    res.times = {"parallel": [1.0, 1.2], "sequential": [2.0, 2.1]}
    assert not res.unreliable


def test_a_demo_keeps_its_tokens_per_pass_for_auto(tmp_path, tiny_folder, monkeypatch):
    """The next `--engine auto` weighs what this demo's decode wrote per pass: its content
    tokens (the answer's tokens without tags, counted here from the timeline's threads) over
    the passes of the live decode."""
    from solm.cli import pasta

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "demo.json"
    r = CliRunner().invoke(pasta.app, ["demo", "-m", tiny_folder, "--engine", "torch",
                                       "--max-new-tokens", "12", "--repeats", "1", "-o",
                                       str(out)])
    assert r.exit_code == 0, r.output
    got = json.loads(out.read_text())
    kept = json.loads((tmp_path / "cache" / "tokens_per_pass.json").read_text())
    assert kept[tiny_folder]["pasta:parallel"] == pytest.approx(
        {"content": got["answer_tokens"] / got["decode_forward_passes"],
         "fed": got["decode_tokens_fed"] / got["decode_forward_passes"]}, abs=1e-4)


def test_a_decodes_passes_are_never_fewer_than_its_critical_path(tiny, pasta_tokenizer):
    """Forward passes and critical path count the same thing (passes after the prompt's, one
    per step feeding every active thread): at every cap, cut blocks and all, the scripted
    answer's decode takes exactly its critical path on torch, and a record never shows
    fewer passes than its critical path (the demo once printed 46 against 47: the closers a
    cap adds to cut blocks were counted as passes nobody decoded)."""
    from solm.core.chat import prompt_ids
    from solm.core.records import Record
    from solm.decode.pasta.decode_file import result_record

    rt, ids = scripted_runtime(tiny, pasta_tokenizer)
    prompt = prompt_ids(pasta_tokenizer, "Two tips?")
    cut_blocks = 0
    for cap in range(2, len(ids) + 3):
        cfg = PastaDecodeConfig(max_new_tokens=cap, sampling=SamplingConfig(temperature=0.0))
        res = rt.generate(prompt, cfg)
        row = result_record(rt, Record("r", "Two tips?"), res, "parallel")
        assert row["forward_passes"] == row["critical_path"] == res.forward_passes, cap
        cut_blocks += "block_cut" in res.flags
        # the stop's closers are in the answer, and a replay feeds them: one pass more
        if res.unfed:
            assert schedule_steps(res.ids, rt.vocab) == res.forward_passes + 1
    assert cut_blocks >= 5


def test_the_fastest_sequential_decoding_is_timed_in_the_same_rotation(tiny, pasta_tokenizer):
    """The yardstick (the fastest sequential decoding here) decodes as many tokens as the
    answer's content from the same prompt, warmed, then timed in the rotation with both
    replays; the figure against it is its fastest time over the parallel side's."""
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    calls, replay = [], rt.replay

    def spy(prompt, response, mode="parallel", **kw):
        calls.append(mode)
        return replay(prompt, response, mode=mode, **kw)

    seconds = iter([9.0, 8.0, 0.7, 0.5, 0.6])  # two warm-up rounds, then three timed runs

    def yardstick(ids, n):
        calls.append(("fastest", len(ids), n))
        return next(seconds)

    rt.replay = spy
    cfg = PastaDecodeConfig(max_new_tokens=12, sampling=SamplingConfig(temperature=0.0))
    res = run_demo(rt, "List three colours.", cfg, repeats=3,
                   yardstick=("llama.cpp's own loop", yardstick))
    n_prompt = next(c[1] for c in calls if isinstance(c, tuple))
    # n + 1 tokens: the first comes from the prefill, so n one-token passes are timed
    f = ("fastest", n_prompt, len(res.content_ids) + 1)
    assert calls == ["parallel", "sequential", f, "parallel", "sequential", f,  # warm-up
                     "parallel", "sequential", f, "sequential", f, "parallel",
                     f, "parallel", "sequential"]
    assert res.times["fastest"] == [0.7, 0.5, 0.6]
    assert res.realized_vs_fastest == pytest.approx(0.5 / min(res.times["parallel"]))
    assert res.yardstick == "llama.cpp's own loop"
    without = run_demo(rt, "List three colours.", cfg, repeats=1)
    assert without.realized_vs_fastest is None and "fastest" not in without.times


def test_the_yardstick_takes_the_gguf_measured_fastest_for_one_token(tmp_path, monkeypatch):
    """`solm bench step`'s one-token passes pick the yardstick's GGUF: the fastest measured
    here for the model (flash variants folded in), q4_0 where nothing is."""
    from solm.engines import cost
    from solm.engines.bandwidth import cpu_description

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    assert cost.fastest_one_token_format("llama.cpp", "smollm2-135m", "q4_0") == "q4_0"
    cost.record_step_costs({"cpu": cpu_description(), "model": "smollm2-135m", "engines": [
        {"engine": "llama.cpp", "variant": "q8_0", "ms": {"1": 7.0, "4": 9.0}},
        {"engine": "llama.cpp", "variant": "q4_1+flash", "ms": {"1": 5.0, "4": 12.0}},
        {"engine": "llama.cpp", "variant": "q4_0", "ms": {"1": 5.5, "4": 8.0}},
        {"engine": "onnxruntime", "variant": "i8", "ms": {"1": 1.0, "4": 2.0}}]})
    assert cost.fastest_one_token_format("llama.cpp", "smollm2-135m", "q4_0") == "q4_1"
    assert cost.fastest_one_token_format("onnxruntime", "smollm2-135m", "fp32") == "i8"
    assert cost.fastest_one_token_format("llama.cpp", "another-model", "q4_0") == "q4_0"


def test_the_demo_says_in_words_when_the_cap_cuts_the_answer(tmp_path, tiny_folder):
    """A cap that ends the answer before the model does is said above the answer, and
    `--no-fastest` leaves the yardstick out of the figures."""
    from solm.cli import pasta

    out = tmp_path / "demo.json"
    r = CliRunner().invoke(pasta.app, ["demo", "-m", tiny_folder, "--engine", "torch",
                                       "--max-new-tokens", "6", "--repeats", "1",
                                       "--no-fastest", "-o", str(out)])
    assert r.exit_code == 0, r.output
    got = json.loads(out.read_text())
    assert "max_new_tokens" in got["flags"]  # a random tiny model never ends in 6 tokens
    said = " ".join(r.output.split())
    assert "The answer below is cut: the cap of 6 new tokens" in said
    assert said.index("The answer below is cut") < said.index("model>")
    assert got["fastest_sequential"] is None and got["realized_vs_fastest"] is None
