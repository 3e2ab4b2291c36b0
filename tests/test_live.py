"""Live views of a PASTA decode: threads as they fork and join, the final reading-order
prefix (what a chat display or a stream may show), and `pasta chat` end to end."""

from typer.testing import CliRunner

from solm.cli import pasta as pasta_cli
from solm.core.chat import text_ids
from solm.core.pasta_lang import strip
from solm.decode.pasta.live import final_reading_order, thread_views
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime, replay_scripts

TEXT = ('Tips:\n1.<promise topic="sleep" tokens="2"/><async> Sleep eight hours every night and '
        'keep a regular schedule.</async>\n2.<promise topic="food" tokens="1"/><async> Eat '
        'greens.</async><sync/> Done.')


def test_final_prefix_only_grows_and_ends_as_the_answer(pasta_tokenizer, tiny, vocab):
    rt = PastaRuntime(tiny, pasta_tokenizer, pool_size=512)
    resp = text_ids(pasta_tokenizer, TEXT)
    streams, anchors = replay_scripts(resp, vocab)
    cfg = PastaDecodeConfig(max_new_tokens=len(resp) + 1, max_fork_tokens=len(resp) + 1)
    state = rt.prefill([1, 2, 3], cfg, chooser=None, scripts=streams, replay_anchors=anchors)
    prefixes, saw_two_open, while_first_open = [], False, set()
    while rt.step(state):
        prefixes.append(final_reading_order(rt, state))
        views = thread_views(rt, state)
        saw_two_open |= sum(not v.done for v in views[1:]) == 2
        assert [v.topic for v in views[1:]] == ["sleep", "food"][:len(views) - 1]
        if len(views) > 1 and not views[1].done:
            while_first_open.add(pasta_tokenizer.decode(prefixes[-1]))
    for a, b in zip(prefixes, prefixes[1:]):
        assert b[:len(a)] == a  # never takes anything back
    assert saw_two_open
    # while the long first block runs, nothing after its promise is final
    assert while_first_open == {"Tips:\n1."}
    assert pasta_tokenizer.decode(prefixes[-1]) == strip(TEXT)


def test_chat_answers_each_turn_and_ends_on_an_empty_line(tiny_folder):
    r = CliRunner().invoke(pasta_cli.app, ["chat", "-m", tiny_folder, "--max-new-tokens", "3"],
                           input="hello\nand again\n\n")
    assert r.exit_code == 0, r.output
    assert r.stdout.count("model>") == 2
    assert r.stderr.count("forward passes") == 2
