"""`pdiff distill`: the main thread forced, the chunks written by the model, promises set to
the exact length of what it wrote, and only rows that strip back to the decoded tokens kept."""

import json
import math
import random

import pytest
from typer.testing import CliRunner

from solm.core.chat import text_ids
from solm.core.records import Record

ROW = ('Tips: <promise topic="sleep" tokens="3"/><async> Sleep well.</async> and '
       '<promise topic="food" tokens="1"/><async> Eat greens.</async><sync/> Done.')


@pytest.fixture(scope="module")
def vocab(pasta_tokenizer):
    from solm.core.systems.pasta import PastaVocab

    return PastaVocab.from_tokenizer(pasta_tokenizer)


def spans_by_text(ids, tok) -> list[tuple[int, int]]:
    """(index of a promise's closer, tokens of its block) read from the tokens' text: a
    closer `" tokens="N"/>` followed by `<async>` opens a block to the next `</async>`."""
    text = tok.convert_ids_to_tokens(ids)
    out, i = [], 0
    while i < len(ids):
        if text[i].startswith('" tokens="') and i + 1 < len(ids) and text[i + 1] == "<async>":
            j = text.index("</async>", i + 2)
            out.append((i, j - i - 2))
            i = j + 1
        else:
            i += 1
    return out


@pytest.mark.parametrize("seed", range(5))
def test_each_promise_becomes_the_exact_length_of_its_block(seed, pasta_tokenizer, vocab):
    from solm.prefs.chunk_distill import exact_promises

    rng = random.Random(seed)
    parts = ["Intro."]
    for c in range(rng.randint(1, 4)):
        words = " ".join(["word"] * rng.randint(1, 60))
        parts.append(f'<promise topic="t" tokens="{rng.randint(1, 9)}"/><async> {words}</async>')
    ids = text_ids(pasta_tokenizer, "".join(parts) + "<sync/> End.")
    got = exact_promises(ids, vocab)
    assert len(got) == len(ids)
    for i, n in spans_by_text(ids, pasta_tokenizer):
        assert pasta_tokenizer.convert_ids_to_tokens(got[i]) == \
            f'" tokens="{max(1, math.ceil(n / 10))}"/>'
    changed = {i for i, (a, b) in enumerate(zip(ids, got)) if a != b}
    assert changed <= {i for i, _ in spans_by_text(ids, pasta_tokenizer)}


def writing_chooser(tok, vocab, blocks: dict[int, str]):
    """A chooser that writes block k's text from `blocks` (then `</async>`), or EOS inside a
    block listed as "EOS"; never asked for the main thread (it is forced)."""
    streams = {k: (text_ids(tok, v) if v != "EOS" else [tok.eos_token_id])
               for k, v in blocks.items()}

    def choose(th, logits, state):
        assert th.tid != 0, "the main thread is forced, never sampled"
        stream = streams[th.tid]
        k = len(th.fed) - 1  # its first fed token is the forced <async>
        return stream[k] if k < len(stream) else vocab.async_close
    return choose


def run_rows(tiny, tok, vocab, blocks, monkeypatch, row=ROW):
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.decode.protocol import Job
    from solm.prefs.chunk_distill import ChunkRunner, chunk_row

    rt = BatchedPastaRuntime(tiny, tok, pool_size=2048, max_batch=2)
    monkeypatch.setattr(rt, "chooser", lambda config, written=(): writing_chooser(tok, vocab,
                                                                                   blocks))
    rec = Record(id="r", prompt="Give tips.", meta={"text": row})
    runner = ChunkRunner(rt, max_new_tokens=400)
    from solm.core.chat import prompt_ids

    job = Job(0, rec, tuple(prompt_ids(tok, rec.prompt)))
    (done,) = list(runner.run([job]))
    original = runner.originals[0]
    return chunk_row(rec, original, done.result.ids, done.result.flags, tok, vocab), \
        done.result, original


def test_the_model_writes_the_chunks_and_the_row_strips_back_to_its_tokens(
        tiny, pasta_tokenizer, vocab, monkeypatch):
    from solm.core.systems.pasta import MAIN, walk_training_order

    tok = pasta_tokenizer
    (row, why), res, original = run_rows(tiny, tok, vocab, {1: " Rest is good for you and "
                                                              "your body.", 2: " Fruit."},
                                         monkeypatch)
    assert why is None
    ids = text_ids(tok, row["annotated"])
    attrs, _ = walk_training_order(ids, vocab)
    blocks = {}
    for t, a in zip(ids, attrs):
        if a.thread != MAIN:
            blocks.setdefault(a.thread, []).append(t)
    assert [tok.decode(b[1:-1]) for b in blocks.values()] == [" Rest is good for you and "
                                                              "your body.", " Fruit."]
    # the main thread is the row's, but for the promises set to their blocks' lengths
    main = [t for t, a in zip(ids, attrs) if a.thread == MAIN]
    o_attrs, _ = walk_training_order(original, vocab)
    o_main = [t for t, a in zip(original, o_attrs) if a.thread == MAIN]
    assert len(main) == len(o_main)
    assert [tok.convert_ids_to_tokens(t) for t, o in zip(main, o_main) if t != o] == \
        ['" tokens="1"/>']  # "sleep" promised 3 tens and got one ten's worth
    # the row's tokens are the decode's, token for token, but the rewritten promises
    assert len(ids) == len(res.ids)
    assert row["response"] == tok.decode([t for t, a in zip(ids, attrs) if not a.is_tag
                                          and t not in vocab.control_ids],
                                         skip_special_tokens=True)


@pytest.mark.parametrize("blocks,why", [
    ({1: "EOS", 2: " Fruit."}, "not_closed_by_model"),
    ({1: "", 2: " Fruit."}, "empty_chunk"),
])
def test_rows_the_model_did_not_finish_are_dropped_with_the_reason(blocks, why, tiny,
                                                                   pasta_tokenizer, vocab,
                                                                   monkeypatch):
    (row, reason), _, _ = run_rows(tiny, pasta_tokenizer, vocab, blocks, monkeypatch)
    assert row is None and reason == why


def test_a_row_that_tokenizes_otherwise_is_dropped(tiny, pasta_tokenizer, vocab, monkeypatch):
    """Tokens written one by one that the tokenizer would merge (" the" as " t" + "he")."""
    from solm.prefs.chunk_distill import chunk_row

    tok = pasta_tokenizer
    ids = text_ids(tok, ROW)
    split = tok.convert_tokens_to_ids(["Ġt", "he"])
    at = ids.index(text_ids(tok, " Eat")[0])
    odd = ids[:at] + split + ids[at:]
    rec = Record(id="r", prompt="p", meta={"text": ROW})
    assert chunk_row(rec, ids, ids, [], tok, vocab)[1] is None
    assert chunk_row(rec, ids, odd, [], tok, vocab) == (None, "tokenizes_otherwise")
    assert chunk_row(rec, ids, ids, ["max_new_tokens"], tok, vocab) == (None, "cut_by_cap")


def test_pdiff_distill_resumes_and_counts(tmp_path, tiny_folder, monkeypatch):
    """The command writes each row once: a rerun decodes nothing; plain rows pass through;
    the summary counts what decoded.jsonl holds; rows.jsonl holds the rows kept, every one
    of them read by the trainer's own reader."""
    from solm.cli import pdiff
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.core.systems.pasta import PastaVocab

    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "prompt": "Give tips.", "annotated": ROW},
        {"id": "b", "prompt": "Say hi.", "response": "Hi there."},
        {"id": "c", "prompt": "More tips.", "annotated": ROW.replace("Tips", "More")}]) + "\n")
    calls = []

    def chooser(self, config, written=()):
        vocab = PastaVocab.from_tokenizer(self.tokenizer)
        calls.append(1)
        return writing_chooser(self.tokenizer, vocab, {1: " Rest.", 2: "EOS"} if len(calls) == 2
                               else {1: " Rest.", 2: " Fruit."})

    monkeypatch.setattr(BatchedPastaRuntime, "chooser", chooser)
    out = tmp_path / "out"
    args = ["distill", "--data", str(data), "--writer", tiny_folder, "-o", str(out),
            "--engine", "torch", "--batch-size", "1"]
    r = CliRunner().invoke(pdiff.app, args)
    assert r.exit_code == 0, r.output
    decoded = [json.loads(x) for x in (out / "decoded.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in decoded) == ["a", "b", "c"]
    dropped = {r["id"] for r in decoded if "dropped" in r}
    assert len(dropped) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kept"] == 1 and summary["plain"] == 1
    assert summary["dropped"]["not_closed_by_model"] == 1
    from solm.train.data import load_sft_rows

    trained = load_sft_rows(out / "rows.jsonl")
    assert sorted(r["id"] for r in trained) == sorted({"a", "b", "c"} - dropped)
    r = CliRunner().invoke(pdiff.app, args)
    assert r.exit_code == 0, r.output
    assert len((out / "decoded.jsonl").read_text().splitlines()) == 3
    assert len((out / "rows.jsonl").read_text().splitlines()) == 2
    assert json.loads((out / "summary.json").read_text())["decoded_now"] == 0
