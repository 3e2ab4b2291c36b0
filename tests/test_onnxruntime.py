"""The onnxruntime engine's own parts (`solm.engines.onnxruntime`): the graph's logits against the
Hugging Face forward under any mask, its KV cells written and read at scattered slots, the
quantized formats' packing against onnxruntime's own kernels, the bias a pass builds, and
its sequential loop. (The systems on it: `test_engine_matrix.py`.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from solm.engines import ENGINES

pytestmark = pytest.mark.skipif(ENGINES["onnxruntime"].unavailable() is not None,
                                reason="onnxruntime is not installed")


def random_visible(n: int, seed: int) -> torch.Tensor:
    """A mask no system writes: causal with random holes, every token seeing itself."""
    g = torch.Generator().manual_seed(seed)
    visible = torch.ones(n, n, dtype=torch.bool).tril() & (torch.rand(n, n, generator=g) > 0.3)
    return visible | torch.eye(n, dtype=torch.bool)


def hf_logits(model, ids, positions, visible) -> torch.Tensor:
    from solm.core.structure import model_mask

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                     attention_mask=model_mask(visible, model)).logits[0]


def ort_model(model, fmt: str, cells: int, tmp_path):
    from solm.engines.onnxruntime.graph import build_graph
    from solm.engines.onnxruntime.session import OrtModel

    proto, _ = build_graph(model, fmt)
    path = tmp_path / f"{fmt}.onnx"
    path.write_bytes(proto.SerializeToString())
    return OrtModel(path, cells, threads=1)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_graph_logits_equal_the_forward_under_any_mask_with_cells_at_scattered_slots(
        arch, tmp_path):
    """Two passes: the first writes 9 tokens at scattered pool cells, the second feeds 7
    more that read them back (in another order) and each other, under a random mask and
    jumping positions; every row equals one HF forward over all 16 tokens."""
    from solm.core.models import tiny_model

    model, tok = tiny_model(seed=3, arch=arch)
    n, first = 16, 9
    ids = torch.randint(5, 1000, (n,), generator=torch.Generator().manual_seed(1)).tolist()
    positions = [0, 1, 2, 3, 4, 14, 15, 16, 5, 6, 7, 17, 18, 8, 9, 19]
    visible = random_visible(n, seed=2)
    ref = hf_logits(model, ids, positions, visible)
    ort = ort_model(model, "fp32", 40, tmp_path)
    slots = np.random.default_rng(0).permutation(40)[:n]

    def bias(rows, keys):
        return np.where(visible[rows][:, keys].numpy(), 0.0, -np.inf).astype(np.float32)

    one = list(range(first))
    out1 = ort.forward(ids[:first], positions[:first], np.zeros(0, np.int64),
                       bias(one, one), slots[:first])
    old = list(range(first))[::-1]  # the cells read in another order than written
    two = list(range(first, n))
    out2 = ort.forward(ids[first:], positions[first:], slots[old], bias(two, old + two),
                       slots[first:])
    ours = torch.cat([out1, out2])
    assert (ours - ref).abs().max().item() < 1e-4


def dequantize_blocks(q: np.ndarray, scales: np.ndarray, bits: int, k: int) -> np.ndarray:
    """MatMulNBits' B written out the other way: unpack, subtract the default zero point,
    scale per block."""
    if bits == 4:
        q = np.stack([q & 0x0F, q >> 4], axis=-1).reshape(*q.shape[:-1], -1)
    values = q.astype(np.float32) - (1 << (bits - 1))
    n = q.shape[0]
    return (values * scales.reshape(n, -1, 1)).reshape(n, k)


def dequantized(fmt: str, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the weight each format's kernel multiplies, read by hand from the packed arrays;
    the largest rounding step of each weight)."""
    from solm.engines.onnxruntime.graph import quantize_blocks, quantize_columns

    n, k = weight.shape
    if fmt == "i8":
        q, scales = quantize_columns(weight)
        return (q.astype(np.float32) * scales[None, :]).T, np.repeat(scales[:, None], k, 1)
    bits = {"q4": 4, "q8": 8}[fmt]
    q, scales = quantize_blocks(weight, bits)
    return (dequantize_blocks(q, scales, bits, k),
            np.repeat(scales.reshape(n, -1), 32, axis=1))


@pytest.mark.parametrize("fmt", ["i8", "q8", "q4"])
def test_quantization_is_what_onnxruntimes_kernel_multiplies(fmt):
    """The packing (nibble order, zero point, scale layout, the 7-bit range of i8) read by
    hand equals the weight to half a step, and onnxruntime's kernel computes x @ that
    dequantized weight (up to its own int8 rounding of x)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from solm.engines.onnxruntime.graph import GraphWriter

    rng = np.random.default_rng(len(fmt))
    n, k = 24, 64
    # rows of very different size: a per-row or per-block scale is needed
    weight = (rng.standard_normal((n, k)) * np.linspace(0.1, 3, n)[:, None]).astype(np.float32)
    deq, step = dequantized(fmt, weight)
    assert np.all(np.abs(deq - weight) <= step / 2 + 1e-6)
    w = GraphWriter(fmt)
    out = w.linear("x", weight)
    graph = helper.make_graph(w.nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [3, n])],
                              w.inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    x = rng.standard_normal((3, k)).astype(np.float32)
    got = ort.InferenceSession(proto.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = x @ deq.T
    # the kernels quantize x to 8 bits as well: ~1% of the largest output
    assert np.abs(got - want).max() < 0.02 * np.abs(want).max()


def test_quantized_graphs_keep_the_forward_close(tmp_path):
    """Every format's logits stay near the fp32 forward (a broken layout is far off)."""
    from solm.core.models import tiny_model
    from solm.engines.onnxruntime.graph import FORMATS

    model, _ = tiny_model(seed=4)
    ids = list(range(30, 50))
    n = len(ids)
    visible = torch.ones(n, n, dtype=torch.bool).tril()
    ref = hf_logits(model, ids, list(range(n)), visible)
    for fmt in FORMATS:
        ort = ort_model(model, fmt, n, tmp_path)
        causal = np.where(visible.numpy(), 0.0, -np.inf).astype(np.float32)
        ours = ort.forward(ids, range(n), np.zeros(0, np.int64), causal, range(n))
        err = (ours - ref).abs().max().item() / ref.abs().max().item()
        assert err < (1e-5 if fmt == "fp32" else 0.1), (fmt, err)


def test_pass_bias_places_each_groups_mask_over_its_cells():
    """The bias against the rule written directly: fed token i reads cell c iff c is in
    its group's keys and the group's mask says so; columns are the read cells (ascending),
    then the fed tokens' own cells in the order fed."""
    from solm.engines.onnxruntime.step import pass_bias

    rng = np.random.default_rng(5)
    written = np.array([9, 3, 14])
    groups = [(2, np.array([0, 1, 2, 9, 3]), rng.random((2, 5)) > 0.4),
              (1, np.array([7, 2, 14]), np.array([[True, False, True]]))]
    read, bias = pass_bias(written, groups, 16)
    assert read.tolist() == [0, 1, 2, 7]
    cells = read.tolist() + written.tolist()
    row = 0
    for rows, keys, mask in groups:
        for r in range(rows):
            for col, cell in enumerate(cells):
                hit = [j for j, key in enumerate(keys) if key == cell]
                seen = bool(hit) and bool(mask[r, hit[0]])
                assert (bias[row, col] == 0.0) == seen and (seen or bias[row, col] == -np.inf)
            row += 1


@pytest.mark.parametrize("seed", range(6))
def test_prefill_chunks_cut_the_fed_rows_into_runs_that_cover_each_group_once(seed):
    """The rule written another way: row r of the pass (groups laid end to end) goes to run
    r // size, with its group's keys and its own mask row; runs hold at most `size` rows."""
    from solm.engines.onnxruntime.step import prefill_chunks

    rng = np.random.default_rng(seed)
    groups = [(int(n), np.arange(int(n) + 2), rng.random((int(n), int(n) + 2)) > 0.5)
              for n in rng.integers(1, 9, size=int(rng.integers(1, 5)))]
    total, size = sum(n for n, _, _ in groups), int(rng.integers(1, 7))
    owner = [(g, r) for g, (n, _, _) in enumerate(groups) for r in range(n)]
    runs = list(prefill_chunks(groups, total, size))
    assert [(a, b) for a, b, _ in runs] == [(a, min(total, a + size))
                                            for a in range(0, total, size)]
    for a, b, chunk in runs:
        expected = [owner[r] for r in range(a, b)]
        got_rows = [row for n, keys, mask in chunk for row in mask]
        assert sum(n for n, _, _ in chunk) == b - a == len(got_rows)
        for (g, r), row in zip(expected, got_rows):
            assert (row == groups[g][2][r]).all()
        assert [len(keys) for _, keys, _ in chunk] == \
            [len(groups[g][1]) for g in dict.fromkeys(g for g, _ in expected)]


def _run_draw(seed: int):
    """A pass of 1-13 fed rows in groups, runs of 1-6 rows; a third of the draws causal (a
    row reads cells written by itself, earlier rows or before the pass), a third reading
    one row ahead, a third anywhere."""
    rng = np.random.default_rng(seed)
    total, size = int(rng.integers(1, 14)), int(rng.integers(1, 7))
    written = rng.permutation(40)[:total]
    reach = (0, 1, total)[seed % 3]  # a row reads cells written up to `reach` rows on
    groups, at = [], 0
    while at < total:
        rows = int(rng.integers(1, total - at + 1))
        keys = np.unique(np.concatenate([written, rng.choice(40, size=4, replace=False)]))
        index = {int(c): i for i, c in enumerate(written)}
        row_ids = at + np.arange(rows)
        mask = rng.random((rows, len(keys))) > 0.5
        mask &= np.array([[index.get(int(k), -1) <= r + reach for k in keys]
                          for r in row_ids])
        groups.append((rows, keys, mask))
        at += rows
    return groups, written, size


@pytest.mark.parametrize("seed", range(36))
def test_a_pass_runs_in_runs_only_when_no_row_reads_a_later_runs_cell(seed):
    """The rule by brute force: more rows than one run holds, and every (row, cell) the
    masks allow has the cell written by the row's run or an earlier one, or not written by
    this pass at all (already in the pool)."""
    from solm.engines.onnxruntime.step import reads_only_earlier_runs

    groups, written, size = _run_draw(seed)
    writer = {int(c): i for i, c in enumerate(written)}
    ok, row = len(written) > size, 0
    for rows, keys, mask in groups:
        for r in range(rows):
            for j, k in enumerate(keys):
                if mask[r, j] and int(k) in writer and writer[int(k)] // size > (row + r) // size:
                    ok = False
        row += rows
    assert reads_only_earlier_runs(groups, written, size) is ok


def test_the_run_draws_meet_both_answers():
    from solm.engines.onnxruntime.step import reads_only_earlier_runs

    answers = [reads_only_earlier_runs(*_run_draw(seed)) for seed in range(36)]
    assert answers.count(True) >= 6 and answers.count(False) >= 6
    assert any(len(_run_draw(seed)[1]) <= _run_draw(seed)[2] for seed in range(36))


def test_a_pass_with_no_group_reads_no_cell():
    from solm.engines.onnxruntime.step import pass_bias

    read, bias = pass_bias(np.zeros(0, np.int64), [], 8)
    assert read.size == 0 and bias.shape == (0, 0)
    with pytest.raises(ValueError, match="cover 0 rows of the 2 fed"):
        pass_bias(np.array([3, 5]), [], 8)


def test_own_loop_is_greedy_generation(tmp_path):
    """The sequential yardstick writes what Hugging Face's greedy generate writes."""
    from solm.core.models import tiny_model
    from solm.engines.onnxruntime.session import OrtOwnLoop

    model, _ = tiny_model(seed=6)
    prompt = list(range(40, 52))
    loop = OrtOwnLoop(ort_model(model, "fp32", 64, tmp_path))
    ours, _, _ = loop.generate(prompt, 12)
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                             min_new_tokens=12)[0, len(prompt):].tolist()
    assert ours == ref


def test_sessions_do_not_spin_between_passes(tmp_path):
    """onnxruntime's intra-op threads sleep after a run: spinning, they took the cores from
    the work between passes (solm's decode measured 30% slower) and from llama.cpp's loop
    in another process."""
    from solm.core.models import tiny_model

    model, _ = tiny_model(seed=6)
    options = ort_model(model, "fp32", 64, tmp_path).session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_paged_kv_frees_what_a_policy_stops_showing(tmp_path):
    """TIP's paged KV: hiding a page's tokens frees their cells for good, and a token shown
    again after it was hidden is an error."""
    from types import SimpleNamespace

    from solm.core.models import tiny_model
    from solm.engines.onnxruntime.step import OrtPagedKV

    model, _ = tiny_model(seed=7)
    kv = OrtPagedKV(ort_model(model, "fp32", 12, tmp_path))
    row = object()
    a, b = SimpleNamespace(tokens=[0, 1, 2, 3]), SimpleNamespace(tokens=[4, 5])
    kv.forward([row], [[5, 6, 7, 8]], [[0, 1, 2, 3]], [[(a, 4)]])
    assert len(kv._free) == 8
    kv.forward([row], [[9, 10]], [[4, 5]], [[(b, 2)]])  # page a hidden
    assert len(kv._free) == 10
    with pytest.raises(RuntimeError, match="showed a token again"):
        kv.forward([row], [[11]], [[6]], [[(a, 4), (b, 2), (SimpleNamespace(tokens=[6]), 1)]])


def test_check_engines_on_onnxruntime_holds_and_refuses_the_other_engines_type(
        tmp_path, tiny_folder, monkeypatch):
    """`solm check-engines --engine onnxruntime` (fp32 graph): every greedy answer equal to
    torch's or parted at a near-tie, logits within the tolerance; llama.cpp's --gguf-type
    given to it is refused (it would be ignored)."""
    import json

    from typer.testing import CliRunner

    from solm.cli.main import app

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n" for i, p in
                               enumerate(["Name a fruit.", "Count to three."])))
    out = tmp_path / "engines.jsonl"
    runner = CliRunner()
    r = runner.invoke(app, ["check-engines", "-m", tiny_folder, "-p", str(prompts),
                            "--engine", "onnxruntime", "--max-new-tokens", "12", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and all(x["verdict"] in ("equal", "near-tie") for x in rows)
    assert max(x["max_logit_diff"] for x in rows) < 1e-3
    r = runner.invoke(app, ["check-engines", "-m", tiny_folder, "-p", str(prompts),
                            "--engine", "onnxruntime", "--gguf-type", "q8_0"])
    assert r.exit_code != 0 and "--gguf-type" in r.output


def test_paged_kv_decodes_what_a_causal_forward_with_the_hidden_tokens_masked_computes(
        tmp_path):
    """A TIP row on onnxruntime's paged KV: a prompt prefilled in one run (causal among its
    own tokens), two one-token passes, then a page hidden: every pass's last logits equal
    the Hugging Face forward of the whole sequence under the mask written by hand (causal,
    the hidden tokens invisible from the pass that hid them on)."""
    from types import SimpleNamespace

    from solm.core.models import tiny_model
    from solm.engines.onnxruntime.step import OrtPagedKV

    model, _ = tiny_model(seed=8)
    kv = OrtPagedKV(ort_model(model, "fp32", 32, tmp_path))
    row = object()
    ids = [5, 17, 9, 33, 2, 41, 8, 12, 29, 3]
    pages = [SimpleNamespace(tokens=list(range(i, min(i + 4, 12)))) for i in (0, 4, 8)]
    hidden_from = {9: {4, 5, 6, 7}}  # the pass of token 9 no longer shows page 1
    feeds = [(list(range(6)), [(pages[0], 4), (pages[1], 2)]),
             ([6], [(pages[0], 4), (pages[1], 3)]), ([7], [(pages[0], 4), (pages[1], 4)]),
             ([8], [(pages[0], 4), (pages[1], 4), (pages[2], 1)]),
             ([9], [(pages[0], 4), (pages[2], 2)])]
    for fed, shown in feeds:
        got = kv.forward([row], [[ids[t] for t in fed]], [fed], [shown])[0]
        n = fed[-1] + 1
        visible = torch.ones(n, n, dtype=torch.bool).tril()
        for q in range(n):
            for k in hidden_from.get(q, ()):
                visible[q, k] = False
        want = hf_logits(model, ids[:n], list(range(n)), visible)[-1]
        assert (got - want).abs().max() < 1e-4, fed


def test_graph_cache_keys_name_everything_that_changes_the_graph():
    """Two register counts, two control-token sets, two formats: different graphs, so
    different cached files; the same request, the same file."""
    from solm.engines.onnxruntime.session import cached_graph_path

    paths = {cached_graph_path("smollm2-135m", fmt, tokens, regs)
             for fmt in ("fp32", "q8") for tokens, regs in (("tip", 2), ("tip", 16),
                                                           ("pasta", 16))}
    assert len(paths) == 6
    assert cached_graph_path("smollm2-135m", "q8", "tip", 2) == cached_graph_path(
        "smollm2-135m", "q8", "tip", 2)
