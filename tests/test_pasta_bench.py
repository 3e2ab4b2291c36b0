"""`pasta bench`: each row's two replays are interleaved in alternating order and the
medians compared; a realized speedup far above the theoretical one is flagged."""

from solm.decode.pasta.runtime import PastaRuntime
from solm.eval.pasta_bench import bench_row, summarize

ROW = {"id": "r", "prompt": "Two tips?",
       "annotated": 'Two tips:\n1.<promise topic="sleep" tokens="1"/><async> Sleep eight '
                    'hours.</async>\n2.<promise topic="food" tokens="1"/><async> Eat '
                    'vegetables.</async><sync/>'}


def test_replays_alternate_and_the_medians_are_compared(tiny, pasta_tokenizer):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    calls, times, replay = [], iter([5.0, 1.0, 2.0, 9.0, 4.0, 3.0, 6.0, 2.5]), rt.replay

    def spy(prompt, response, mode="parallel", **kw):
        from dataclasses import replace
        calls.append(mode)
        return replace(replay(prompt, response, mode=mode, **kw), decode_s=next(times))

    rt.replay = spy
    row = bench_row(rt, ROW, repeats=4)
    assert calls == ["sequential", "parallel", "parallel", "sequential",
                     "sequential", "parallel", "parallel", "sequential"]
    # sequential took 5, 9, 4, 2.5 -> lower median 4; parallel 1, 2, 3, 6 -> 2
    assert (row.seq_s, row.par_s) == (4.0, 2.0)
    assert row.realized_speedup == 2.0
    assert row.distrusted == (2.0 > 1.1 * row.theoretical_speedup)
    assert summarize([row], 0.0)["distrusted_rows"] == int(row.distrusted)


class _EqualCostStep:
    """The real pool step, but every forward pass costs exactly `cost` on a virtual clock
    (whatever its width): the machine `pasta bench`'s theoretical speedup describes."""

    def __init__(self, inner, clock, cost=0.01):
        self.inner, self.clock, self.cost, self.wide_cost = inner, clock, cost, cost

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, tokens, attrs, prefill=False):
        self.clock.now += self.cost if len(tokens) == 1 or prefill else self.wide_cost
        return self.inner(tokens, attrs, prefill=prefill)


def test_equal_pass_costs_give_realized_equal_to_theoretical(tiny, pasta_tokenizer,
                                                             monkeypatch):
    """Efficiency 1.40 was printed (a parallel pass cheaper than a sequential one).
    With every pass costing the same, realized == theoretical for any --repeats, and the
    efficiency is exactly 1 (the oracle: the schedule's passes, counted by hand below)."""
    import types

    import solm.decode.pasta.runtime as runtime_module
    import solm.eval.pasta_bench as bench_module
    from solm.core.chat import text_ids
    from solm.core.pasta_lang import strip

    clock = types.SimpleNamespace(now=0.0)
    fake_time = types.SimpleNamespace(perf_counter=lambda: clock.now)
    monkeypatch.setattr(runtime_module, "time", fake_time)
    monkeypatch.setattr(bench_module, "time", fake_time)
    base = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    rt = PastaRuntime(tiny, pasta_tokenizer, forward=_EqualCostStep(base.forward, clock))
    plain = len(text_ids(pasta_tokenizer, strip(ROW["annotated"])))
    for repeats in (1, 2, 3):
        row = bench_row(rt, ROW, repeats=repeats, compare_generate=True,
                        generate=lambda ids, n: n * 0.01)
        assert row.replay_exact
        assert row.seq_forward_passes == plain  # one token a pass
        assert abs(row.seq_s - plain * 0.01) < 1e-9
        assert abs(row.par_s - row.forward_passes * 0.01) < 1e-9
        assert abs(row.theoretical_speedup - plain / row.critical_path) < 1e-12
        assert row.forward_passes == row.critical_path
        assert abs(row.realized_speedup - row.theoretical_speedup) < 1e-9
        assert abs(row.efficiency - 1.0) < 1e-9 and not row.distrusted
    summary = summarize([row], 0.0)
    assert abs(summary["efficiency"] - 1.0) < 1e-9
    assert summary["efficiency_flagged"] is False
    # a pass made cheaper when it feeds several tokens: efficiency above 1.1, flagged
    rt.forward.wide_cost = 0.005
    row = bench_row(rt, ROW, repeats=1)
    assert row.efficiency > 1.1 and row.distrusted
    assert summarize([row], 0.0)["efficiency_flagged"] is True


def test_the_warm_up_replays_the_longest_row_whole_on_both_sides(tiny, pasta_tokenizer):
    """Warmed on 32 tokens, the first timed replay to reach a new key length paid
    the allocator's growth, always the sequential side under --repeats 1 (efficiency 1.40).
    The warm-up now replays each side of the longest row whole, untimed."""
    from solm.core.chat import text_ids
    from solm.core.pasta_lang import strip
    from solm.eval.pasta_bench import warm_up

    short = {**ROW, "id": "s", "annotated": ROW["annotated"].replace("eight hours", "well")}
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    calls, replay = [], rt.replay

    def spy(prompt, response, mode="parallel", **kw):
        calls.append((mode, list(response), kw.get("max_new_tokens")))
        return replay(prompt, response, mode=mode, **kw)

    rt.replay = spy
    warm_up(rt, [short, ROW], compare_generate=False)
    longest = ROW["annotated"]
    assert calls == [("sequential", text_ids(pasta_tokenizer, strip(longest)), None),
                     ("parallel", text_ids(pasta_tokenizer, longest), None)]
