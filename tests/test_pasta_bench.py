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
