"""bench/pasta_vs_llamacpp.py's record of each pass's width (tokens fed) and seconds, read
by the pass cost analysis: every answer token is fed once, in as many passes as the replay
counts; the median pass of each width."""

import sys
from pathlib import Path

from solm.core.chat import text_ids
from solm.core.models import tiny_model
from solm.decode.pasta.runtime import PastaRuntime

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from pasta_vs_llamacpp import ms_by_width, replay_passes, width_histogram  # noqa: E402

PROMPT = "User: give me some tips\nAssistant:"
ANNOTATED = ('Tips:\n1. Sleep:<promise topic="sleep" tokens="1"/><async> Get eight hours of '
             'sleep every night, and keep a regular schedule even on weekends.</async>\n'
             '2. Eat:<promise topic="eat" tokens="2"/><async> Eat vegetables and fruit daily, '
             'and drink water.</async>\n<sync/> Done.')


def test_pass_widths_feed_every_answer_token_once_in_the_replays_passes(pasta_tokenizer):
    model, _ = tiny_model(pasta_tokenizer, seed=2, num_layers=2)
    rt = PastaRuntime(model, pasta_tokenizer, pool_size=512)
    prompt, resp = text_ids(pasta_tokenizer, PROMPT), text_ids(pasta_tokenizer, ANNOTATED)
    step = rt.forward
    widths, seconds = replay_passes(rt, prompt, resp)
    assert rt.forward is step  # the recorder is taken off again
    replay = rt.replay(prompt, resp)
    assert sum(widths) == len(resp)
    assert len(widths) == replay.forward_passes
    assert max(widths) >= 3  # main and both blocks run together after the second promise
    hist = width_histogram([{"pasta_pass_widths": widths}, {"pasta_pass_widths": [1, 1]}])
    assert sum(hist.values()) == len(widths) + 2
    assert hist[1] == widths.count(1) + 2
    assert len(seconds) == len(widths) and min(seconds) > 0
    rows = [{"pasta_pass_widths": [1, 2, 1, 2, 3], "pasta_pass_ms": [4.0, 9.0, 6.0, 7.0, 1.0]},
            {"pasta_pass_widths": [1], "pasta_pass_ms": [5.0]}]
    assert ms_by_width(rows) == {1: 5.0, 2: 8.0, 3: 1.0}  # medians, by width
