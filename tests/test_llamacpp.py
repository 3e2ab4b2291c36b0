"""The llama.cpp engine against the reference: a GGUF export's logits against the Hugging Face
model's own forward pass (not solm's runtime), greedy decodes against the torch engine, and
the errors a user meets."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from steered_models import save_model
from test_runtime import ANNOTATED

from solm.core.errors import SolmError

runner = CliRunner()
TOL = 1e-3  # the acceptance's: fp32 logits of an f32 export, F32 KV cache


def hf_logits(model, ids: list[int]) -> torch.Tensor:
    """The oracle: the Hugging Face model's own forward pass over the whole sequence."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def f32_export(engine: str) -> list[str]:
    """The f32 export for llama.cpp; nothing on torch (where --gguf-type is refused)."""
    return ["--gguf-type", "f32"] if engine != "torch" else []


def agree_up_to_near_ties(ours: torch.Tensor, ref: torch.Tensor) -> None:
    """Within TOL everywhere, the same argmax wherever the reference's top-2 gap exceeds TOL."""
    assert (ours - ref).abs().max().item() < TOL
    top2 = ref.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > TOL
    assert torch.equal(ours.argmax(-1)[clear], ref.argmax(-1)[clear])


def first_near_tie(model, prompt: list[int], answer: list[int]) -> int:
    """How many tokens of a greedy answer are decided by a top-2 gap above TOL (the oracle's
    logits along the answer): two engines must agree on at least those."""
    logits = hf_logits(model, prompt + answer)[len(prompt) - 1:]
    for i in range(len(answer)):
        top2 = logits[i].topk(2).values
        if top2[0] - top2[1] <= TOL:
            return i
    return len(answer)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, pasta_tokenizer):
    """A tiny random llama with PASTA's control tokens, and its f32 export."""
    from solm.core.models import tiny_model
    from solm.engines.llamacpp.export import write_gguf

    model, tok = tiny_model(pasta_tokenizer, seed=3, hidden_size=64, num_layers=2)
    path = tmp_path_factory.mktemp("gguf") / "tiny.f32.gguf"
    write_gguf(model, tok, path, "f32", meta={"system": "pasta"})
    return model, tok, path


def prompt_ids(tok, texts):
    from solm.core.chat import prompt_ids as chat_prompt

    return [chat_prompt(tok, t) for t in texts]


def test_teacher_forced_logits_equal_the_hf_forward(exported):
    from solm.engines.llamacpp.binding import LlamaContext, Token

    model, tok, path = exported
    ids = tok("The quick brown fox jumps over the lazy dog, twice: the quick brown fox.")[
        "input_ids"] + [tok.convert_tokens_to_ids("<sync/>")]
    with LlamaContext(path, n_ctx=256, n_seq=1, kv_type="f32") as ctx:
        ours = ctx.decode([Token(t, i, 0) for i, t in enumerate(ids)])
    agree_up_to_near_ties(ours, hf_logits(model, ids))


def test_two_sequences_in_one_call_see_only_their_own_cells(exported):
    """Two prompts fed in one llama_decode, as two sequences, get the logits each gets alone:
    a sequence is exactly what a request sees."""
    from solm.engines.llamacpp.binding import LlamaContext, Token

    model, tok, path = exported
    a, b = prompt_ids(tok, ["Name a colour.", "Why is the sky blue? Answer briefly."])
    with LlamaContext(path, n_ctx=512, n_seq=2, kv_type="f32") as ctx:
        both = ctx.decode([Token(t, i, 0) for i, t in enumerate(a)]
                          + [Token(t, i, 1) for i, t in enumerate(b)])
    agree_up_to_near_ties(both[:len(a)], hf_logits(model, a))
    agree_up_to_near_ties(both[len(a):], hf_logits(model, b))


def greedy(model, tok, prompts, engine: str, gguf=None, batch: int = 4, max_new: int = 24,
           unified: bool = True):
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.decode.pasta.runtime import PastaDecodeConfig

    config = PastaDecodeConfig(mode="sequential", max_new_tokens=max_new,
                               sampling=SamplingConfig(temperature=0.0))
    forward = None
    if engine == "llama.cpp":
        from solm.engines.llamacpp.binding import LlamaContext
        from solm.engines.llamacpp.step import LlamaCppStep

        forward = LlamaCppStep(LlamaContext(gguf, n_ctx=batch * 256, kv_type="f32",
                                            n_seq=2 * batch if unified else batch,
                                            unified=unified))
    rt = BatchedPastaRuntime(model, tok, pool_size=batch * 256, max_batch=batch,
                             forward=forward)
    return [r.ids for r in rt.generate_many(prompts, config)]


TEXTS = ["Give three tips for staying healthy.", "What is 2 + 2?", "Describe a cat.",
         "Write a haiku about rain.", "List the planets.", "Translate 'hello' to French.",
         "Why do leaves fall?", "Name a famous painter.", "How do magnets work?",
         "Suggest a name for a dog.", "What is the capital of Peru?", "Define entropy.",
         "Tell me a joke.", "How far is the moon?", "What is a prime number?", "Say hi."]


@pytest.mark.parametrize("unified", [True, False], ids=["one-cache", "a-stream-each"])
def test_greedy_sequential_equals_torch_up_to_the_first_near_tie(exported, unified):
    """16 prompts, continuous batching 4 at a time on both engines (on llama.cpp in one
    unified cache, or in a KV stream per request as `pasta distill` runs them): each answer
    is the torch engine's up to the first token the oracle's logits leave within TOL."""
    model, tok, path = exported
    prompts = prompt_ids(tok, TEXTS)
    ours = greedy(model, tok, prompts, "llama.cpp", path, unified=unified)
    ref = greedy(model, tok, prompts, "torch")
    compared = 0
    for p, a, b in zip(prompts, ours, ref):
        n = first_near_tie(model, p, b)
        assert a[:n] == b[:n]
        compared += n
    assert compared >= 16 * 12  # most of the answers were compared, not skipped as ties


def test_requests_sharing_a_prompt_read_one_copy(exported):
    """Samples of one prompt (a group: the prompt written once, given to each sample's
    sequence by seq_cp) decode as the prompt decoded alone does."""
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.decode.pasta.runtime import PastaDecodeConfig
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.step import LlamaCppStep

    model, tok, path = exported
    (prompt,) = prompt_ids(tok, ["Give three tips for staying healthy."])
    config = PastaDecodeConfig(mode="sequential", max_new_tokens=16,
                               sampling=SamplingConfig(temperature=0.0))
    ctx = LlamaContext(path, n_ctx=2048, n_seq=8, kv_type="f32")
    rt = BatchedPastaRuntime(model, tok, pool_size=2048, max_batch=3, forward=LlamaCppStep(ctx))
    shared = [r.ids for r in rt.sample(prompt, config, 3)]
    alone = greedy(model, tok, [prompt], "llama.cpp", path, batch=1, max_new=16)[0]
    assert shared == [alone] * 3
    # every sequence was released: the cache is empty again
    assert all(ctx.seq_pos_max(s) == -1 for s in range(ctx.n_seq))


def test_samples_sharing_a_prompt_compute_what_the_prompt_alone_does(exported):
    """The shared prompt's cells reach every sample's sequence (`seq_cp`): each sample's
    logits along its answer equal the Hugging Face forward over prompt + answer, as a decode
    of the prompt alone does. (Greedy tokens alone can hide a sample that never sees its
    prompt: a tiny random model's next token leans on the last token.)"""
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.batched import BatchedPastaRuntime
    from solm.decode.pasta.runtime import PastaDecodeConfig
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.step import LlamaCppStep

    model, tok, path = exported
    (prompt,) = prompt_ids(tok, ["Give three tips for staying healthy."])
    config = PastaDecodeConfig(mode="sequential", max_new_tokens=6, record_logits=True,
                               sampling=SamplingConfig(temperature=0.0))
    ctx = LlamaContext(path, n_ctx=2048, n_seq=8, kv_type="f32")
    rt = BatchedPastaRuntime(model, tok, pool_size=2048, max_batch=3, forward=LlamaCppStep(ctx))
    alone = rt.sample(prompt, config, 1)[0]
    for res in [alone] + rt.sample(prompt, config, 3):
        # row j: after feeding answer token j, as the oracle's row at prompt + j
        ref = hf_logits(model, prompt + res.ids)[len(prompt):]
        assert (res.logits - ref).abs().max().item() < TOL


def test_decode_command_on_llama_cpp_writes_the_torch_engines_rows(tmp_path, exported,
                                                                    monkeypatch):
    """`pasta decode --engine llama.cpp --mode sequential` on a model folder: the GGUF is
    exported into the cache once, the rows are the torch engine's (greedy), the manifest
    names the engine."""
    from solm.cli import pasta

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    model, tok, _ = exported
    save_model(model, tok, tmp_path / "m")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "prompt": t}) + "\n"
                               for i, t in enumerate(TEXTS[:4])))
    rows = {}
    for engine in ("torch", "llama.cpp"):
        out = tmp_path / f"{engine}.jsonl"
        r = runner.invoke(pasta.app, ["decode", "-m", str(tmp_path / "m"), "-p", str(prompts),
                                      "-o", str(out), "--mode", "sequential", "--engine",
                                      engine, *f32_export(engine), "--temperature", "0",
                                      "--max-new-tokens", "12", "--dtype", "fp32", "-q"])
        assert r.exit_code == 0, r.output
        rows[engine] = {x["id"]: x["response"] for x in map(json.loads, open(out))}
        manifest = json.loads((tmp_path / f"{engine}.jsonl.manifest.json").read_text())
        assert manifest["speed"]["engine"] == engine
    assert rows["llama.cpp"] == rows["torch"]
    assert len(list((tmp_path / "cache" / "gguf").glob("*.gguf"))) == 1


def test_a_rerun_resumes_across_the_other_engines_weight_setting(tmp_path, tiny_folder):
    """A llama.cpp decode's rows do not depend on --dtype (torch's weight setting): a rerun
    changing only it resumes; changing the engine is refused. (On torch, --gguf-type is
    refused outright: it would be ignored.)"""
    from solm.cli import pasta

    out, prompts = tmp_path / "rows.jsonl", tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": "Describe a cat."}) + "\n")
    base = ["decode", "-p", str(prompts), "-m", tiny_folder, "-o", str(out), "--mode",
            "sequential", "--max-new-tokens", "4", "--no-compile", "-q"]
    r = runner.invoke(pasta.app, base + ["--engine", "llama.cpp", "--dtype", "fp32"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(pasta.app, base + ["--engine", "llama.cpp", "--dtype", "bf16"])
    assert r.exit_code == 0 and json.loads(r.stdout)["skipped"] == 1, r.output
    r = runner.invoke(pasta.app, base + ["--engine", "torch", "--dtype", "fp32"])
    assert r.exit_code != 0 and "engine" in r.output
    r = runner.invoke(pasta.app, base + ["--engine", "torch", "--gguf-type", "f16"])
    assert r.exit_code == 2 and "--gguf-type" in r.output


def test_llama_cpp_refusals_are_one_line(tmp_path, exported):
    from solm.cli import pasta

    model, tok, _ = exported
    save_model(model, tok, tmp_path / "m")
    r = runner.invoke(pasta.app, ["decode", "hi", "-m", str(tmp_path / "m"), "--engine",
                                  "llama.cpp", "--mode", "parallel"])
    assert r.exit_code != 0 and "Pred-10X" in r.output and "Traceback" not in r.output
    r = runner.invoke(pasta.app, ["decode", "hi", "-m", str(tmp_path / "m"), "--engine",
                                  "llama.cpp", "--mode", "sequential", "--quantize", "int8"])
    assert r.exit_code != 0 and "--gguf-type" in r.output


def test_export_errors_are_one_line_and_leave_no_file(tmp_path, pasta_tokenizer, monkeypatch):
    from solm.cli.main import app
    from solm.core.models import tiny_model

    out = tmp_path / "o.gguf"
    not_a_model = tmp_path / "notes.txt"
    not_a_model.write_text("hello")
    r = runner.invoke(app, ["export", "gguf", str(not_a_model), str(out)])
    assert r.exit_code != 0 and "not a model" in r.output and not out.exists()
    model, tok = tiny_model(pasta_tokenizer, arch="qwen2")
    model.save_pretrained(tmp_path / "qwen")
    tok.save_pretrained(tmp_path / "qwen")
    r = runner.invoke(app, ["export", "gguf", str(tmp_path / "qwen"), str(out)])
    assert r.exit_code != 0 and "Qwen2ForCausalLM" in r.output and not out.exists()
    same = tmp_path / "same.gguf"
    same.write_bytes(b"GGUF")
    r = runner.invoke(app, ["export", "gguf", str(same), str(same)])
    assert r.exit_code != 0 and "it is the input" in r.output
    r = runner.invoke(app, ["export", "gguf", str(tmp_path / "qwen"), str(tmp_path / "x.bin")])
    assert r.exit_code != 0 and ".gguf" in r.output

    # a failure while the tensors are written leaves neither the file nor its partial copy
    import gguf

    from solm.engines.llamacpp.export import write_gguf

    llama, tok = tiny_model(pasta_tokenizer)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", broken)
    with pytest.raises(RuntimeError):
        write_gguf(llama, tok, out, "f16")
    assert list(tmp_path.glob("o.gguf*")) == []


@pytest.mark.parametrize("outtype,tol,agree", [("f16", 0.05, 0.8), ("bf16", 0.05, 0.8),
                                               ("q8_0", 0.05, 0.8), ("q4_1", 0.3, 0.5),
                                               ("q4_0", 0.3, 0.5)])
def test_smaller_exports_stay_close_to_the_reference(exported, tmp_path, outtype, tol, agree):
    """Rounded weights, the same model: logits close, top token mostly the same (a check that
    the tensors are laid out right, not only that the file loads)."""
    from solm.engines.llamacpp.binding import LlamaContext, Token
    from solm.engines.llamacpp.export import write_gguf

    model, tok, _ = exported
    path = tmp_path / f"tiny.{outtype}.gguf"
    write_gguf(model, tok, path, outtype)
    ids = tok("Planets orbit the sun because gravity pulls them inward.")["input_ids"]
    with LlamaContext(path, n_ctx=128, kv_type="f16") as ctx:
        ours = ctx.decode([Token(t, i, 0) for i, t in enumerate(ids)])
    ref = hf_logits(model, ids)
    assert (ours - ref).abs().max().item() < tol * ref.abs().max().item()
    assert (ours.argmax(-1) == ref.argmax(-1)).float().mean().item() >= agree


def test_repacked_and_plain_kernels_compute_the_same_model(exported, tmp_path):
    """`repack=False` (llama.cpp's plain kernels) and the default repacked layout decode one
    q4_0 file to the same logits up to activation rounding, both close to the reference."""
    from solm.engines.llamacpp.binding import LlamaContext, Token
    from solm.engines.llamacpp.export import write_gguf

    model, tok, _ = exported
    path = tmp_path / "tiny.q4_0.gguf"
    write_gguf(model, tok, path, "q4_0")
    ids = tok("Planets orbit the sun because gravity pulls them inward.")["input_ids"]
    ref = hf_logits(model, ids)
    out = {}
    for repack in (True, False):
        with LlamaContext(path, n_ctx=128, kv_type="f16", repack=repack) as ctx:
            out[repack] = ctx.decode([Token(t, i, 0) for i, t in enumerate(ids)])
        assert (out[repack] - ref).abs().max().item() < 0.3 * ref.abs().max().item()
    assert (out[True] - out[False]).abs().max().item() < 0.05 * ref.abs().max().item()
    assert (out[True].argmax(-1) == out[False].argmax(-1)).float().mean().item() >= 0.9


# GGML's block layouts (ggml-common.h), written out here as the oracle: bytes per 32 weights
BLOCK_BYTES = {"q8_0": 2 + 32, "q4_0": 2 + 16, "q4_1": 2 + 2 + 16}
ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


@pytest.mark.parametrize("outtype", ["f32", "f16", "bf16", "q8_0", "q4_1", "q4_0"])
def test_every_matrix_is_written_in_the_requested_type(exported, tmp_path, outtype):
    """A q8_0 export that wrote its matrices unquantized still loaded and decoded: check the
    written tensor types and sizes against the type asked for (vectors, the norms, stay f32)."""
    import gguf

    from solm.engines.llamacpp.export import write_gguf

    model, tok, _ = exported
    path = tmp_path / f"t.{outtype}.gguf"
    write_gguf(model, tok, path, outtype)
    matrices = 0
    for t in gguf.GGUFReader(path).tensors:
        n = int(t.n_elements)
        if len(t.shape) == 1:
            assert t.tensor_type.name == "F32", t.name
            assert t.n_bytes == 4 * n
            continue
        matrices += 1
        assert t.tensor_type.name == outtype.upper(), (t.name, t.tensor_type.name)
        expected = n // 32 * BLOCK_BYTES[outtype] if outtype in BLOCK_BYTES \
            else n * ELEMENT_BYTES[outtype]
        assert t.n_bytes == expected, t.name
    assert matrices == 1 + 7 * model.config.num_hidden_layers  # embeddings + 7 per layer


def test_export_refuses_unwritable_or_existing_outputs_before_loading(tmp_path, tiny_folder,
                                                                      monkeypatch):
    """A new user's trial: /proc/x.gguf failed after 18 s of loading, a path under a file said
    "File exists", an existing .gguf was replaced without notice, and no manifest was left."""
    from solm.cli.main import app
    import solm.engines.llamacpp.export as export

    def no_load(*a, **k):
        raise AssertionError("the model was loaded before the output was checked")

    with monkeypatch.context() as m:
        m.setattr(export, "write_gguf", no_load)
        m.setattr("solm.core.models.load_model", no_load)
        for bad, said in [("/proc/x.gguf", "cannot be written"),
                          (str(tmp_path / "notes.txt" / "x.gguf"), "is a file")]:
            (tmp_path / "notes.txt").write_text("hello")
            r = runner.invoke(app, ["export", "gguf", tiny_folder, bad, "--outtype", "f32"])
            assert r.exit_code != 0 and said in r.output, r.output
        existing = tmp_path / "old.gguf"
        existing.write_bytes(b"GGUF-old")
        r = runner.invoke(app, ["export", "gguf", tiny_folder, str(existing)])
        assert r.exit_code != 0 and "--replace" in r.output
        assert existing.read_bytes() == b"GGUF-old"
    r = runner.invoke(app, ["export", "gguf", tiny_folder, str(existing), "--replace",
                            "--outtype", "f32"])
    assert r.exit_code == 0, r.output
    assert existing.read_bytes()[:4] == b"GGUF"
    manifest = json.loads((tmp_path / "old.gguf.manifest.json").read_text())
    assert manifest["command"] == "solm export gguf"
    assert manifest["export"]["outtype"] == "f32" and manifest["model"] == tiny_folder


def test_export_records_the_models_solm_facts(tmp_path, tiny_folder):
    import gguf

    from solm.cli.main import app

    out = tmp_path / "t.gguf"
    r = runner.invoke(app, ["export", "gguf", tiny_folder, str(out), "--outtype", "f32",
                            "--system", "tip"])
    assert r.exit_code == 0, r.output
    fields = gguf.GGUFReader(out).fields
    assert fields["solm.control_tokens"].contents() == "tip"
    tokens = fields["tokenizer.ggml.tokens"].contents()
    assert "<reg_0>" in tokens
    with pytest.raises(SolmError, match="Pred-10X"):
        from solm.engines import choose
        from solm.decode.pasta.config import PastaDecodeConfig

        choose("llama.cpp", "pasta", config=PastaDecodeConfig(mode="parallel"),
               model="smollm2-135m")


# ---- TIP ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def register_happy(tmp_path_factory):
    """A tiny TIP model that opens registers often (`steered_models`) and its f32 export."""
    from steered_models import steered_model

    from solm.core.models import load_tokenizer
    from solm.core.systems.tip import TipVocab
    from solm.core.vocabulary import add_control_tokens
    from solm.engines.llamacpp.export import write_gguf

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "tip", num_registers=4)
    model = steered_model(tok, TipVocab.from_tokenizer(tok, 4).control_ids, 1.0, seed=5)
    path = tmp_path_factory.mktemp("tip") / "tip.f32.gguf"
    write_gguf(model, tok, path, "f32", meta={"control_tokens": "tip", "num_registers": 4})
    return model.eval(), tok, path


def tip_decode(model, tok, prompts, policy, budget, engine, gguf=None, batch=2, new=96):
    from solm.core.sampling import SamplingConfig
    from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipRuntime

    kv = None
    if engine == "llama.cpp":
        from solm.engines.llamacpp.binding import LlamaContext
        from solm.engines.llamacpp.tip import LlamaKV

        kv = LlamaKV(LlamaContext(gguf, n_ctx=batch * 512, n_seq=batch, kv_type="f32",
                                  unified=False))
    rt = TipRuntime(model, tok, num_pages=64, page_size=16, num_registers=4, kv=kv)
    cfg = TipDecodeConfig(policy=policy, budget=budget, batch_size=batch, max_new_tokens=new,
                          sampling=SamplingConfig(temperature=0.0), record_logits=True,
                          record_reads=True)
    out = {r.rid: r for r in rt.run([TipRequest(i, p) for i, p in enumerate(prompts)], cfg)}
    return [out[i] for i in range(len(prompts))]


PROBLEMS = ["What is 17 * 23?", "Solve x^2 - 5x + 6 = 0.", "How many primes are below 30?",
            "Simplify (a+b)^2 - (a-b)^2."]


@pytest.mark.parametrize("policy,budget", [("tip", None), ("streamingllm", 48),
                                           ("streaming-prompt", 48), ("dense", None)])
def test_tip_runtime_on_llama_cpp_equals_torch(register_happy, policy, budget):
    """4 problems, 2 at a time, greedy: the same tokens up to the first near-tie, the same
    tokens read at every step (the same steps evicted), logits within TOL."""
    from solm.core.systems.tip import TipVocab

    model, tok, path = register_happy
    prompts = prompt_ids(tok, PROBLEMS)
    ours = tip_decode(model, tok, prompts, policy, budget, "llama.cpp", path)
    ref = tip_decode(model, tok, prompts, policy, budget, "torch")
    vocab = TipVocab.from_tokenizer(tok, 4)
    newest_kills = 0
    for p, a, b in zip(prompts, ours, ref):
        n = first_near_tie(model, p, b.ids) if policy == "dense" else len(b.ids)
        assert a.ids[:n] == b.ids[:n]
        same = min(n, len(a.logits))
        assert (a.logits[:same] - b.logits[:same]).abs().max().item() < TOL
        assert a.reads[:same] == b.reads[:same]
        regs = [vocab.registers.get(t) for t in b.ids]
        newest_kills += sum(1 for x, y in zip(regs, regs[1:]) if x is not None and x == y)
        if policy != "dense":
            assert a.evicted_pages == b.evicted_pages
    if policy == "tip":
        assert sum(r.evicted_pages for r in ref) > 0
        assert newest_kills > 0  # the deferred kill was exercised


@pytest.mark.parametrize("policy,budget", [("tip", None), ("streamingllm", 48)])
def test_compacted_streams_decode_what_torch_decodes(register_happy, policy, budget,
                                                     monkeypatch):
    """Streams compacted whenever a cell is a hole (this model's TIP steps are a token or two;
    the streaming window drops pages of 16): the KV copied out and set back packed, and
    every later pass equals torch's (same tokens, same logits)."""
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.tip import LlamaKV

    monkeypatch.setattr(LlamaKV, "compact_holes", 1)
    monkeypatch.setattr(LlamaKV, "compact_share", 0.0)
    compacted = []
    real = LlamaContext.seq_compact

    def counting(self, seq):
        compacted.append(seq)
        real(self, seq)

    monkeypatch.setattr(LlamaContext, "seq_compact", counting)
    model, tok, path = register_happy
    prompts = prompt_ids(tok, PROBLEMS)
    ours = tip_decode(model, tok, prompts, policy, budget, "llama.cpp", path)
    ref = tip_decode(model, tok, prompts, policy, budget, "torch")
    assert len(compacted) >= 4
    for a, b in zip(ours, ref):
        assert a.ids == b.ids
        assert (a.logits - b.logits).abs().max().item() < TOL


def test_a_one_page_streaming_window_is_refused_on_llama_cpp(register_happy):
    """A window of one recent page drops the token before each new page: the refusal says
    so, and forcing it anyway is what llama.cpp would refuse (so the rule is needed)."""
    from solm.decode.tip.policies import make_policy
    from solm.engines.llamacpp.tip import policy_refusal

    assert "--budget >= 36" in policy_refusal(make_policy("streamingllm", 32, 16))
    assert policy_refusal(make_policy("streamingllm", 36, 16)) is None
    model, tok, path = register_happy
    with pytest.raises(RuntimeError, match="llama_decode failed"):
        tip_decode(model, tok, prompt_ids(tok, PROBLEMS[:1]), "streamingllm", 32,
                   "llama.cpp", path)


def test_h2o_on_llama_cpp_is_refused_in_one_line(tmp_path, tiny_folder):
    from solm.cli import tip

    r = runner.invoke(tip.app, ["decode", "What is 2+2?", "-m", tiny_folder, "--engine",
                                "llama.cpp", "--policy", "h2o", "--budget", "256"])
    assert r.exit_code != 0 and "attention" in r.output and "Traceback" not in r.output


# ---- PASTA's parallel threads (overlap layout) ---------------------------------------------

def replay_on_llama(model, tok, gguf, prompt, responses, batch=3):
    """Teacher-force Pasta-Lang responses through the batched runtime on llama.cpp, several
    requests at once; each result's logits in training order."""
    from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
    from solm.decode.pasta.runtime import PastaDecodeConfig, replay_scripts
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.step import LlamaCppStep

    ctx = LlamaContext(gguf, n_ctx=4096, n_seq=64, kv_type="f32")
    rt = BatchedPastaRuntime(model, tok, pool_size=4096, max_batch=batch,
                             forward=LlamaCppStep(ctx))
    reqs = []
    for i, resp in enumerate(responses):
        streams, anchors = replay_scripts(resp, rt.vocab)
        cfg = PastaDecodeConfig(mode="parallel", record_logits=True,
                                max_new_tokens=len(resp) + 1, max_fork_tokens=len(resp) + 1)
        reqs.append(BatchRequest(i, prompt, cfg, scripts=streams,
                                 replay_anchors=frozenset(anchors)))
    out = {d.rid: d.result for d in rt.run(reqs)}
    assert all(ctx.seq_pos_max(s) == -1 for s in range(ctx.n_seq))  # everything released
    return [out[i] for i in range(len(responses))]


@pytest.fixture(scope="module")
def overlap_model(exported):
    import copy

    model, tok, path = exported
    model = copy.deepcopy(model)
    model.config.solm_positions = "overlap"
    return model, tok, path


def test_overlap_threads_on_llama_cpp_equal_a_forward_under_the_oracle(overlap_model):
    """Annotated answers with 1-3 blocks, uneven lengths and two syncs, three requests in
    flight at once: every logits row equals one forward pass of the HF model under the
    spec's overlap mask and positions (tests/oracles.py), not solm's structure."""
    from oracles import pasta_oracle

    from solm.core.chat import text_ids
    from solm.core.structure import model_mask

    model, tok, path = overlap_model
    texts = [*ANNOTATED[:2], ANNOTATED[2] + " End."]  # test_runtime's, ending in main
    prompt = text_ids(tok, "User: give me some tips\nAssistant:")
    responses = [text_ids(tok, t) for t in texts]
    results = replay_on_llama(model, tok, path, prompt, responses)
    for resp, res in zip(responses, results):
        ids = prompt + resp
        visible, positions, _ = pasta_oracle(ids, tok, "overlap")
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                        attention_mask=model_mask(visible, model)).logits[0][len(prompt):]
        assert res.ids == resp
        assert (res.logits - ref).abs().max().item() < TOL
    assert max(r.threads for r in results) >= 3


def test_a_pred10x_model_is_refused_on_llama_cpp_in_parallel_mode_only(overlap_model):
    from solm.decode.pasta.config import PastaDecodeConfig
    from solm.decode.pasta.system import PastaEngine
    from solm.engines import ENGINES

    engine, llama = PastaEngine(), ENGINES["llama.cpp"]
    assert "Pred-10X" in llama.refusal("pasta", config=PastaDecodeConfig(mode="parallel"),
                                       settings=engine, model="smollm2-135m")
    assert llama.refusal("pasta", config=PastaDecodeConfig(mode="sequential"),
                         settings=engine, model="smollm2-135m") is None


def tag_happy_overlap_model():
    """A tiny overlap-layout model that writes promises (`steered_models`)."""
    from steered_models import steered_model

    from solm.core.models import load_tokenizer
    from solm.core.systems.pasta import PastaVocab
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer("smollm2-135m")
    add_control_tokens(None, tok, "pasta")
    vocab = PastaVocab.from_tokenizer(tok)
    model = steered_model(tok, [vocab.promise_open, vocab.sync, *list(vocab.close_tens)[:3]],
                          0.07, seed=4)
    model.config.solm_positions = "overlap"
    return model.eval(), tok


def test_the_demo_runtime_on_llama_cpp_decodes_what_torch_does(tmp_path):
    """`pasta demo`'s one-request runtime (`PastaRuntime` on `LlamaPoolStep`): the same
    threads and answer as on torch, greedy, and its timed replays run on llama.cpp."""
    from solm.core.sampling import SamplingConfig
    from solm.decode.pasta.demo import run_demo
    from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.export import write_gguf
    from solm.engines.llamacpp.step import LlamaPoolStep

    model, tok = tag_happy_overlap_model()
    path = tmp_path / "m.gguf"
    write_gguf(model, tok, path, "f32")
    cfg = PastaDecodeConfig(max_new_tokens=48, sampling=SamplingConfig(temperature=0.0))
    ours = PastaRuntime(model, tok, pool_size=1024, forward=LlamaPoolStep(
        LlamaContext(path, n_ctx=1024, n_seq=64, kv_type="f32"), 1024))
    ref = PastaRuntime(model, tok, pool_size=1024)
    a, b = (run_demo(rt, "List three colours.", cfg, repeats=1) for rt in (ours, ref))
    assert a.decoded.ids == b.decoded.ids and a.decoded.threads == b.decoded.threads >= 3
    # llama.cpp joins a sync's blocks one pass later: never fewer passes than torch
    assert a.parallel.forward_passes >= b.parallel.forward_passes
    assert a.sequential.forward_passes == b.sequential.forward_passes


def test_pasta_decode_parallel_on_llama_cpp_writes_the_torch_engines_answers(tmp_path,
                                                                             monkeypatch):
    """An overlap model that writes promises (its head favours the tags) decoded with
    `pasta decode --mode parallel` on both engines: the same answers, greedy, with threads."""
    from solm.cli import pasta

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    model, tok = tag_happy_overlap_model()
    save_model(model, tok, tmp_path / "m", system="pasta", control_tokens="pasta",
               positions="overlap")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "prompt": t}) + "\n"
                               for i, t in enumerate(TEXTS[:6])))
    rows = {}
    for engine in ("torch", "llama.cpp"):
        out = tmp_path / f"{engine}.jsonl"
        r = runner.invoke(pasta.app, ["decode", "-m", str(tmp_path / "m"), "-p", str(prompts),
                                      "-o", str(out), "--mode", "parallel", "--engine", engine,
                                      *f32_export(engine), "--temperature", "0",
                                      "--max-new-tokens", "40", "--dtype", "fp32", "-q"])
        assert r.exit_code == 0, r.output
        rows[engine] = {x["id"]: (x["annotated"], x["threads"], x["forward_passes"])
                        for x in map(json.loads, open(out))}
    assert [a for a, _, _ in rows["llama.cpp"].values()] == \
        [a for a, _, _ in rows["torch"].values()]
    assert max(t for _, t, _ in rows["torch"].values()) >= 3


def test_pasta_chat_on_llama_cpp_answers_what_torch_does(tmp_path, monkeypatch):
    """Two turns of `pasta chat` on the promise-writing overlap model, greedy: the same
    answers (with threads) on both engines; the engine is named; a Pred-10X model on
    llama.cpp is refused in one line."""
    from solm.cli import pasta

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    model, tok = tag_happy_overlap_model()
    save_model(model, tok, tmp_path / "m", system="pasta", control_tokens="pasta",
               positions="overlap")
    answers = {}
    for engine in ("torch", "llama.cpp"):
        r = runner.invoke(pasta.app, ["chat", "-m", str(tmp_path / "m"), "--engine", engine,
                                      *f32_export(engine), "--temperature", "0",
                                      "--max-new-tokens", "40", "--dtype", "fp32"],
                          input=f"{TEXTS[0]}\n{TEXTS[1]}\n\n")
        assert r.exit_code == 0, r.output
        assert f"decoding on {engine}" in r.stderr
        answers[engine] = [line for line in r.stdout.splitlines() if "model>" in line]
    assert len(answers["torch"]) == 2 and answers["llama.cpp"] == answers["torch"]
    assert "forward passes" in r.stderr and "threads" in r.stderr
    save_model(model, tok, tmp_path / "p10", system="pasta", control_tokens="pasta")
    r = runner.invoke(pasta.app, ["chat", "-m", str(tmp_path / "p10"), "--engine", "llama.cpp"],
                      input="hi\n\n")
    assert r.exit_code != 0 and "overlap" in r.output and "Traceback" not in r.output


def test_llama_cpps_own_loop_generates_the_hf_greedy_answer(exported):
    """The yardstick `pasta bench --engine llama.cpp` and bench/llamacpp_speed.py time:
    llama.cpp's own loop gives the HF model's greedy tokens up to the first near-tie."""
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.own_loop import OwnLoop

    model, tok, path = exported
    loop = OwnLoop(LlamaContext(path, n_ctx=512, n_seq=1, kv_type="f32"))
    for ids in prompt_ids(tok, TEXTS[:4]):
        ours, _, _ = loop.generate(ids, 24)
        ref = model.generate(torch.tensor([ids]), max_new_tokens=24, min_new_tokens=24,
                             do_sample=False)[0, len(ids):].tolist()
        n = first_near_tie(model, ids, ref)
        assert ours[:n] == ref[:n] and n >= 8
    loop.close()


def test_pasta_bench_on_llama_cpp_replays_what_torch_replays(tmp_path, monkeypatch):
    """`pasta bench --engine llama.cpp` on an overlap model: every annotated row replayed
    exactly, the same theoretical speedups as on torch and never fewer passes (a sync joins
    one pass later there), timed against llama.cpp's own loop; a Pred-10X model is refused."""
    from solm.cli import pasta

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    model, tok = tag_happy_overlap_model()
    save_model(model, tok, tmp_path / "m", system="pasta", control_tokens="pasta",
               positions="overlap")
    annotated = tmp_path / "a.jsonl"
    annotated.write_text("".join(json.dumps({"id": str(i), "prompt": "Give me tips.",
                                             "annotated": a}) + "\n"
                                 for i, a in enumerate(ANNOTATED[:3])))
    rows = {}
    for engine in ("torch", "llama.cpp"):
        out = tmp_path / f"{engine}.jsonl"
        r = runner.invoke(pasta.app, ["bench", "-a", str(annotated), "-m", str(tmp_path / "m"),
                                      "--engine", engine, *f32_export(engine), "--repeats", "1",
                                      "--dtype", "fp32", "--no-compile", "-o", str(out), "-q"])
        assert r.exit_code == 0, r.output
        summary = json.loads((tmp_path / f"{engine}.jsonl.summary.json").read_text())
        assert summary["engine"] == engine and summary["replay_exact"]
        rows[engine] = {x["id"]: x for x in map(json.loads, open(out))}
    assert summary["generate"] == "llama.cpp's own loop" and summary["seq_vs_generate"] > 0
    for i, ref in rows["torch"].items():
        ours = rows["llama.cpp"][i]
        assert ours["theoretical_speedup"] == ref["theoretical_speedup"]
        assert ours["forward_passes"] >= ref["forward_passes"]
    save_model(model, tok, tmp_path / "p10", system="pasta", control_tokens="pasta")
    r = runner.invoke(pasta.app, ["bench", "-a", str(annotated), "-m", str(tmp_path / "p10"),
                                  "--engine", "llama.cpp"])
    assert r.exit_code != 0 and "overlap" in r.output and "Traceback" not in r.output


def test_sot_points_on_llama_cpp_equal_the_hf_forward(exported, monkeypatch):
    """Skeleton-of-Thought on llama.cpp (`BatchedSotRuntime` on `LlamaCppStep`), three
    questions at once: every point's logits equal one HF forward over the shared prefix, its
    own prompt and its tokens (each point as if decoded alone), the same answers as torch's
    batched runtime, and every sequence is released at the end."""
    from solm.decode.sot import runtime as sot_runtime
    from solm.decode.sot.batched import BatchedSotRuntime
    from solm.decode.sot.runtime import SotConfig
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.step import LlamaCppStep

    model, tok, path = exported
    monkeypatch.setattr(sot_runtime, "parse_skeleton", lambda text: ["Apples", "Pears",
                                                                     "Plums"])
    cfg = SotConfig(max_skeleton_tokens=10, max_point_tokens=6, stop_at_newline=False,
                    record_logits=True, max_new_tokens=30)
    step = LlamaCppStep(LlamaContext(path, n_ctx=4096, n_seq=32, kv_type="f32"))
    ours = dict(BatchedSotRuntime(model, tok, pool_size=4096, max_batch=3, forward=step)
                .run(list(enumerate(TEXTS[:4])), cfg))
    ref = dict(BatchedSotRuntime(model, tok, pool_size=4096, max_batch=3)
               .run(list(enumerate(TEXTS[:4])), cfg))
    for i in range(4):
        a = ours[i]
        assert (a.text, a.point_tokens, a.forward_passes) == \
            (ref[i].text, ref[i].point_tokens, ref[i].forward_passes)
        assert len(a.point_ids) == 3
        for own, gen, rows in zip(a.point_prompts, a.point_ids, a.point_logits):
            full = hf_logits(model, a.prefix_ids + own + gen)
            start = len(a.prefix_ids) + len(own) - 1
            agree_up_to_near_ties(rows, full[start:start + rows.shape[0]])
    assert all(step.ctx.seq_pos_max(s) == -1 for s in range(32))


# ---- Planned Diffusion (overlap layout) -----------------------------------------------------

PLANS = ['Intro <promise topic="a" tokens="1"/> and <promise topic="b" tokens="2"/><sync/> end.',
         'Two: <promise topic="a" tokens="1"/> and <promise topic="b" tokens="1"/><sync/> ok',
         'Three <promise topic="x" tokens="2"/><promise topic="y" tokens="1"/>'
         '<promise topic="z" tokens="1"/><sync/> then <promise topic="w" tokens="1"/><sync/>.',
         "No plan at all, just a few words."]


@pytest.fixture(scope="module")
def pdiff_overlap(tmp_path_factory, pdiff_tok):
    from solm.core.models import tiny_model
    from solm.engines.llamacpp.export import write_gguf

    model, _ = tiny_model(pdiff_tok, seed=6)
    model.config.solm_positions = "overlap"
    path = tmp_path_factory.mktemp("pdiff") / "pdiff.f32.gguf"
    write_gguf(model, pdiff_tok, path, "f32", meta={"control_tokens": "pdiff"})
    return model, pdiff_tok, path


def pdiff_decode(model, tok, prompts, plans, gguf=None):
    from solm.core.chat import text_ids
    from solm.decode.pdiff.runtime import PdiffDecodeConfig, PdiffRequest, PdiffRuntime

    forward = None
    if gguf is not None:
        from solm.engines.llamacpp.binding import LlamaContext
        from solm.engines.llamacpp.step import LlamaPdiffStep

        forward = LlamaPdiffStep(LlamaContext(gguf, n_ctx=4096, n_seq=64, kv_type="f32"))
    rt = PdiffRuntime(model, tok, pool_size=4096, max_batch=4, forward=forward)
    # one slot a step, the schedule the near-tie counts below were measured at
    config = PdiffDecodeConfig(max_new_tokens=160, record=True, steps_ratio=1.0)
    out = {d.rid: d.result for d in rt.run(
        PdiffRequest(i, p, config, text_ids(tok, s)) for i, (p, s) in
        enumerate(zip(prompts, plans)))}
    if gguf is not None:
        assert all(forward.ctx.seq_pos_max(s) == -1 for s in range(64))  # all released
    return [out[i] for i in range(len(prompts))]


@pytest.mark.parametrize("block_size", [0, 4])
def test_planned_diffusion_on_llama_cpp_equals_torch(pdiff_overlap, block_size, monkeypatch):
    """8 prompts (plans of 0-4 chunks, two rounds), 4 at a time: the same chunks, and every
    denoising pass's logits rows within TOL of the torch engine's, which the runtime tests
    prove equal to training's forward; whole chunks, and chunks in blocks of 4 (a pass then
    feeds a finished block beside the current one, in two calls)."""
    from solm.core.chat import text_ids

    model, tok, path = pdiff_overlap
    monkeypatch.setattr(model.config, "solm_block_size", block_size, raising=False)
    prompts = [text_ids(tok, p) for p in ("One.", "Two, longer prompt.", "Three", "Four!",
                                          "Five", "Six six", "Seven.", "Eight")]
    plans = PLANS * 2
    ours = pdiff_decode(model, tok, prompts, plans, path)
    ref = pdiff_decode(model, tok, prompts, plans)
    compared = parted = 0
    for a, b in zip(ours, ref):
        assert len(a.chunks) == len(b.chunks)
        for sa, sb in zip(a.steps, b.steps):
            if sa.keys() != sb.keys() or any(sa[k][0] != sb[k][0] for k in sa):
                # rows equal within TOL, yet a step committed other slots: a tiny random
                # model's near-flat rows rank slots by entropies equal to ~1e-6
                parted += 1
                break
            for k in sa:
                fed = ~torch.isnan(sb[k][1]).any(-1)  # the slots the pass fed
                assert torch.equal(fed, ~torch.isnan(sa[k][1]).any(-1))
                assert (sa[k][1][fed] - sb[k][1][fed]).abs().max().item() < TOL
                compared += 1
        else:
            assert a.ids == b.ids and a.forward_passes == b.forward_passes
    # (blocks of 4 rank fewer slots a step, so near-ties part more runs: 4 of 8 measured)
    assert parted <= (2 if block_size == 0 else 4) and compared >= 20
    assert sum(len(r.chunks) for r in ref) >= 12


def test_eval_run_on_llama_cpp_gives_the_torch_runs_outputs(tmp_path, tiny_folder, monkeypatch):
    """`pasta eval run --engine llama.cpp` (timed, then batched): every method's outputs are
    the torch run's (greedy, f32 export); `auto` puts sequential and sot on llama.cpp;
    run.json names each method's engine, and a rerun on another engine is refused instead of
    mixing rows."""
    from solm.cli import pasta_eval

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    prompts = tmp_path / "alpaca.jsonl"
    prompts.write_text("".join(json.dumps({"instruction": p}) + "\n" for p in TEXTS[:3]))
    outs = {}
    for engine, batch in (("torch", 1), ("llama.cpp", 1), ("auto", 3)):
        run_dir = tmp_path / f"run-{engine}"
        methods = ["--method", f"sequential={tiny_folder}", "--method", f"sot={tiny_folder}",
                   "--sot-skeleton-tokens", "8"]
        r = runner.invoke(pasta_eval.app, [
            "run", "-o", str(run_dir), "--prompts", str(prompts), *methods, "--no-judge",
            "--max-new-tokens", "10", "--dtype", "fp32", "--no-compile", "--engine", engine,
            *f32_export(engine), "--batch-size", str(batch), "-q"])
        assert r.exit_code == 0, r.output
        outs[engine] = {(kind, x["id"]): x["output"] for kind in ("sequential", "sot")
                        for x in map(json.loads, (run_dir / "outputs" / f"{kind}.jsonl")
                                     .read_text().splitlines())}
        run = json.loads((run_dir / "run.json").read_text())
        expected = {"torch": "torch", "llama.cpp": "llama.cpp", "auto": "llama.cpp"}[engine]
        assert run["engines"]["sequential"] == run["engines"]["sot"] == expected
    assert outs["llama.cpp"] == outs["torch"] == outs["auto"]
    r = runner.invoke(pasta_eval.app, [
        "run", "-o", str(tmp_path / "run-llama.cpp"), "--prompts", str(prompts), *methods,
        "--no-judge", "--max-new-tokens", "10", "--dtype", "fp32", "--no-compile",
        "--engine", "torch", "-q"])
    assert r.exit_code != 0 and "engines" in r.output


def test_the_server_on_llama_cpp_answers_what_torch_does(tmp_path, monkeypatch):
    """`solm serve --engine llama.cpp` in process (`make_engine`), an overlap model: chat
    answers in both modes equal the torch server's, 4 requests at once; on a Pred-10X model
    a parallel request is a 400 naming the mode."""
    import concurrent.futures

    from fastapi.testclient import TestClient

    from solm.core.generation import resolve_decode
    from solm.decode.registry import decode_system
    from solm.serve.app import ServeSettings, create_app
    from solm.serve.systems import make_engine

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    model, tok = tag_happy_overlap_model()
    folder = tmp_path / "m"
    save_model(model, tok, folder, system="pasta", control_tokens="pasta",
               positions="overlap")
    opts = dict(mode="parallel", max_new_tokens=40, penalize="blocks", seed=0, pool_size=512,
                max_fork_tokens=64, max_queue=8, max_batch=4, compile=False, quantize=None,
                policy="tip", budget=None, registers=None, page_size=64, gguf_type="f32")
    answers = {}
    for engine_name in ("torch", "llama.cpp"):
        decoding = resolve_decode(str(folder), {"temperature": 0.0})
        engine, defaults, what = make_engine(decode_system("pasta"), str(folder),
                                             {**opts, "engine": engine_name}, decoding,
                                             "fp32", "cpu")
        assert what.endswith(engine_name)
        engine.start_in_thread()
        app = create_app(engine, ServeSettings("m", defaults))
        with TestClient(app) as client:
            def ask(args):
                text, mode = args
                r = client.post("/v1/chat/completions", json={
                    "model": "m", "messages": [{"role": "user", "content": text}],
                    "max_tokens": 40, "temperature": 0, "mode": mode})
                assert r.status_code == 200, r.text
                return r.json()["choices"][0]["message"]["content"]

            asks = [(t, m) for t in TEXTS[:2] for m in ("parallel", "sequential")]
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                answers[engine_name] = list(pool.map(ask, asks))
    assert answers["llama.cpp"] == answers["torch"]

    pred10x = tmp_path / "p"
    save_model(model, tok, pred10x)
    engine, defaults, _ = make_engine(decode_system("pasta"), str(pred10x),
                                      {**opts, "mode": "sequential", "engine": "llama.cpp"},
                                      resolve_decode(str(pred10x), {}), "fp32", "cpu")
    engine.start_in_thread()
    with TestClient(create_app(engine, ServeSettings("m", defaults))) as client:
        r = client.post("/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
            "mode": "parallel"})
        assert r.status_code == 400 and "Pred-10X" in r.text


def test_prefs_samples_on_llama_cpp_are_the_torch_samples(tmp_path, monkeypatch):
    """`pasta prefs --engine llama.cpp` on an overlap model (f32): the same seeded samples
    and pairs as on torch (solm samples from llama.cpp's logits with its own sampler; an f32
    export's logits differ from torch's by ~1e-5, far inside any sampling boundary here)."""
    from solm.cli import pasta

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    model, tok = tag_happy_overlap_model()
    folder = tmp_path / "m"
    save_model(model, tok, folder, system="pasta", control_tokens="pasta",
               positions="overlap")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "prompt": t}) + "\n"
                               for i, t in enumerate(TEXTS[:2])))
    got = {}
    for engine in ("torch", "llama.cpp"):
        out = tmp_path / engine
        r = runner.invoke(pasta.app, [
            "prefs", "-p", str(prompts), "-o", str(out), "-m", str(folder), "--baseline-model",
            str(folder), "-n", "3", "--quality-weight", "0", "--max-new-tokens", "30",
            "--engine", engine, *f32_export(engine), "--dtype", "fp32", "--batch-size", "4",
            "-q"])
        assert r.exit_code == 0, r.output
        got[engine] = [(x["id"], x["sample"], x["response"]) if "sample" in x else x
                       for x in map(json.loads, (out / "samples.jsonl").read_text().splitlines())]
    assert got["llama.cpp"] == got["torch"] and len(got["torch"]) >= 4


def test_tip_eval_run_on_llama_cpp_gives_the_torch_runs_samples(tmp_path, tiny_folder,
                                                                 monkeypatch):
    """`tip eval run --engine auto`: dense, streamingllm and tip on llama.cpp, h2o on torch
    (named in run.json); greedy samples and live KV equal the torch run's."""
    from solm.cli import tip

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "probs.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"What is {i}+1?",
                                        "answer": str(i + 1)}) + "\n" for i in range(3)))
    rows = {}
    for engine in ("torch", "auto"):
        out = tmp_path / engine
        r = runner.invoke(tip.app, [
            "eval", "run", "-o", str(out), "--data", str(data), "--model", tiny_folder,
            "--registers", "4", "--policies", "dense,streamingllm,h2o,tip", "--budgets", "8,12",
            "--samples", "1", "--max-new-tokens", "12", "--page-size", "4", "--batch-size",
            "3", "--temperature", "0", "--engine", engine, *f32_export(engine),
            "--dtype", "fp32", "--quiet"])
        assert r.exit_code == 0, r.output
        rows[engine] = sorted((x["data"], x["id"], x["policy"], x["response"],
                               x["mean_live_tokens"])
                              for x in map(json.loads, (out / "samples.jsonl").read_text()
                                           .splitlines()))
    run = json.loads((tmp_path / "auto" / "run.json").read_text())
    # streamingllm@8 keeps one recent page of 4 tokens: a gap llama.cpp cannot express, so
    # auto takes the next engine that can (onnxruntime, then torch)
    assert run["engines"] == {"dense": "llama.cpp", "streamingllm@8": "onnxruntime",
                              "streamingllm@12": "llama.cpp", "h2o@8": "torch",
                              "h2o@12": "torch", "tip": "llama.cpp"}
    assert rows["auto"] == rows["torch"] and len(rows["torch"]) == 18
    # a --force rerun adding a point on another engine keeps the other points' engines
    r = runner.invoke(tip.app, [
        "eval", "run", "-o", str(tmp_path / "auto"), "--data", str(data), "--model",
        tiny_folder, "--registers", "4", "--policies", "streamingllm", "--budgets", "16",
        "--samples", "1",
        "--max-new-tokens", "12", "--page-size", "4", "--batch-size", "3", "--temperature",
        "0", "--engine", "torch", "--dtype", "fp32", "--force", "--quiet"])
    assert r.exit_code == 0, r.output
    rerun = json.loads((tmp_path / "auto" / "run.json").read_text())["engines"]
    assert rerun == {**run["engines"], "streamingllm@16": "torch"}


def test_tip_bench_replays_on_both_engines_side_by_side(tmp_path, tiny_folder, monkeypatch):
    """`tip bench --engine torch,llama.cpp`: llama.cpp reads the same live KV as torch under
    each policy it can run (so its cells go when torch's pages do), leaves h2o out and says
    why when the policies were not named, and refuses it in one line when they were."""
    from test_tip_cli import SOLUTION, words

    from solm.annotate.tip_traces import build_traces
    from solm.cli import tip

    monkeypatch.setenv("SOLM_CACHE", str(tmp_path / "cache"))
    rows = build_traces(iter([("q", SOLUTION)] * 100), words, n_traces=3, min_tokens=60,
                        registers=4, min_step_tokens=4)
    traces = tmp_path / "t.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "bench.json"
    common = ["bench", "--traces", str(traces), "--model", tiny_folder, "--registers", "4",
              "--budget", "40", "--page-size", "8", "--batch-size", "2", "--gguf-type", "f32",
              "--dtype", "fp32", "--no-compile", "--quiet"]
    r = runner.invoke(tip.app, common + ["--engine", "torch,llama.cpp", "--out", str(out)])
    assert r.exit_code == 0, r.output
    s = json.loads(out.read_text())
    by = {(p["engine"], p["policy"]): p for p in s["policies"]}
    # `all`: every registered policy (other tests may register toy ones)
    assert {p for e, p in by if e == "torch"} >= {"dense", "tip", "streamingllm", "h2o"}
    assert {p for e, p in by if e == "llama.cpp"} >= {"dense", "tip", "streamingllm"}
    assert ("llama.cpp", "h2o") not in by
    assert "attention" in s["engines"]["llama.cpp"]["refused"]["h2o"]
    for policy in ("dense", "tip", "streamingllm"):
        ours, ref = by["llama.cpp", policy], by["torch", policy]
        assert ours["tokens"] == ref["tokens"]
        assert ours["mean_live_tokens"] == pytest.approx(ref["mean_live_tokens"])
        assert ours["peak_pages"] == ref["peak_pages"]
    assert by["llama.cpp", "tip"]["live_kv_vs_dense"] < 0.95
    assert set(s["llama_cpp_vs_torch_throughput"]) == {p for e, p in by if e == "llama.cpp"}
    assert out.with_suffix(".png").stat().st_size > 0
    r = runner.invoke(tip.app, common + ["--engine", "llama.cpp", "--policies", "dense,h2o"])
    assert r.exit_code != 0 and "attention" in r.output and "Traceback" not in r.output
    r = runner.invoke(tip.app, common + ["--engine", "torch,auto", "--policies", "h2o"])
    assert r.exit_code != 0 and "already in the list" in r.output


# ---- engine equality, checkable (`solm check-engines`) ----------------------------------

def test_check_engines_judges_a_divergence_by_the_oracles_gap(exported):
    """At the first divergence the verdict reads the Hugging Face forward's top-2 gap over
    prompt + common prefix (computed here directly), and the rank the other engine took."""
    from solm.eval.engine_check import compare_answers

    model, tok, _ = exported
    (prompt,) = prompt_ids(tok, ["Name a colour."])
    answer = []
    for _ in range(6):  # the oracle's own greedy answer
        answer.append(int(hf_logits(model, prompt + answer)[-1].argmax()))
    assert compare_answers("a", model, prompt, answer, answer, None, None, 1e-3).verdict \
        == "equal"
    at = 3
    row = hf_logits(model, prompt + answer[:at])[-1]
    second = int(row.topk(2).indices[1])
    gap = float(row.topk(2).values[0] - row.topk(2).values[1])
    other = answer[:at] + [second, 7, 7]
    got = compare_answers("a", model, prompt, answer, other, None, None, gap / 2)
    assert got.first_divergence == at and got.other_took_reference_rank == 2
    assert got.reference_gap == pytest.approx(gap, abs=1e-5)
    assert got.verdict == "beyond tolerance"
    assert compare_answers("a", model, prompt, answer, other, None, None,
                           gap * 2).verdict == "near-tie"
    # one answer ended (end of text) where the other went on
    ended = compare_answers("a", model, prompt, answer, answer[:at], None, 0, 1e-3)
    assert ended.first_divergence == at
    assert ended.other_took_reference_rank == int((row > row[0]).sum()) + 1


def test_check_engines_command_on_an_f32_export_holds(tmp_path, tiny_folder):
    """torch against llama.cpp on an f32 export with F32 KV: every greedy answer equal or
    parted at a near-tie, the logits within the tolerance everywhere."""
    from solm.cli.main import app

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n" for i, p in
                               enumerate(["Name a fruit.", "Count to three.", "Say hi."])))
    out = tmp_path / "engines.jsonl"
    r = runner.invoke(app, ["check-engines", "-m", tiny_folder, "-p", str(prompts),
                            "--max-new-tokens", "12", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 3 and all(x["verdict"] in ("equal", "near-tie") for x in rows)
    assert max(x["max_logit_diff"] for x in rows) < TOL
    assert "F32 KV" in r.output


def test_the_llama_contexts_kv_type_follows_the_export(exported):
    """An f32 export decodes with an F32 KV cache (F16 keys round logits by ~1e-3 and part
    greedy answers where the oracle's gap is above the tolerance); others with F16."""
    from types import SimpleNamespace

    from solm.engines.llamacpp.binding import Token
    from solm.engines.llamacpp.model import kv_type, llama_context

    model, tok, path = exported
    for t in ("f16", "bf16", "q8_0", "q4_0", "q4_1"):
        assert kv_type(SimpleNamespace(gguf_type=t)) == "f16"
    engine = SimpleNamespace(gguf=str(path), gguf_type="f32")
    assert kv_type(engine) == "f32"
    ids = tok("Planets orbit the sun because gravity pulls them inward, and so on.")["input_ids"]
    ctx = llama_context(engine, 256, sequences=1)
    try:
        ours = ctx.decode([Token(t, i, 0) for i, t in enumerate(ids)])
    finally:
        ctx.close()
    assert (ours - hf_logits(model, ids)).abs().max().item() < 2e-4


def test_an_f32_export_decodes_without_flash_attention_where_it_is_faster(exported,
                                                                          monkeypatch):
    """Where `bench step` found llama.cpp's flash attention faster, decodes of quantized
    exports take it; an f32 export never does: its CPU kernel rounds through F16 (a pass of
    two tokens, the second a thread's, ~700x further off the reference than without it), and
    f32 promises the reference's logits."""
    from types import SimpleNamespace

    from solm.engines import get_engine
    from solm.engines.cost import FLASH_ENV
    from solm.engines.llamacpp.binding import LlamaContext, Token

    model, tok, path = exported
    monkeypatch.setenv(FLASH_ENV, "on")
    engine = get_engine("llama.cpp")
    assert engine.measured_variant(SimpleNamespace(gguf_type="q4_0")).endswith("+flash")
    ids = tok("Planets orbit the sun because gravity pulls them inward, and so on.")["input_ids"]
    ref = hf_logits(model, ids)
    batch = [Token(t, i, 0, logits=i == len(ids) - 1) for i, t in enumerate(ids[:-1])]

    def last_two(ctx) -> torch.Tensor:
        try:  # the prompt but its last token, then that token beside a second sequence's
            ctx.decode(batch)
            ctx.seq_cp(0, 1)
            return ctx.decode([Token(ids[-1], len(ids) - 1, 0), Token(ids[-1], len(ids) - 1, 1)])
        finally:
            ctx.close()

    f32 = SimpleNamespace(gguf=str(path), gguf_type="f32")
    assert not engine.measured_variant(f32).endswith("+flash")
    ours = last_two(engine.step("slots", f32, 256).ctx)
    flashed = last_two(LlamaContext(path, n_ctx=256, n_seq=2, kv_type="f32", flash_attn=True))
    # measured on this model: 3e-7 without flash attention, 2e-4 with it
    assert (ours - ref[-1]).abs().max().item() < 1e-5 < (flashed - ref[-1]).abs().max().item()


def test_the_preference_stage_samples_on_the_engine_its_parallel_decodes_allow(tmp_path,
                                                                               pasta_tokenizer):
    """`pasta prefs` samples parallel decodes: under auto a Pred-10X model samples on torch and
    an overlap one on llama.cpp; llama.cpp named for a Pred-10X model is refused; the
    baseline's sequential decodes run on llama.cpp either way."""
    from solm.core.models import tiny_model
    from solm.decode.pasta.system import batched_on_engine

    model, tok = tiny_model(pasta_tokenizer, seed=4)
    pred = save_model(model, tok, tmp_path / "pred", system="pasta", positions="pred10x",
                      control_tokens="pasta")
    over = save_model(model, tok, tmp_path / "over", system="pasta", positions="overlap",
                      control_tokens="pasta")
    args = ("f32", "fp32", "cpu", 512, 2)
    assert batched_on_engine(pred, "parallel", "auto", *args)[1] == "onnxruntime"
    assert batched_on_engine(over, "parallel", "auto", *args)[1] == "llama.cpp"
    assert batched_on_engine(pred, "sequential", "auto", *args)[1] == "llama.cpp"
    with pytest.raises(SolmError, match="overlap"):
        batched_on_engine(pred, "parallel", "llama.cpp", *args)


def test_a_prefill_asks_llama_cpp_for_the_last_prompt_tokens_logits_only(overlap_model):
    """A runtime reads one logits row of a prompt, its last: every other prompt token is fed
    without asking for logits (llama.cpp then skips their output projection)."""
    from solm.core.chat import text_ids
    from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
    from solm.decode.pasta.runtime import PastaDecodeConfig, replay_scripts
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.step import LlamaCppStep

    model, tok, path = overlap_model
    prompt = text_ids(tok, "User: give me some tips\nAssistant:")
    prompts = [prompt, prompt]  # two requests, each prefilling its own copy
    ctx = LlamaContext(path, n_ctx=4096, n_seq=64, kv_type="f32")
    asked: list[tuple[int, int, bool]] = []  # (sequence, position, logits asked)
    decode = ctx.decode

    def spy(tokens):
        asked.extend((t.seq, t.pos, t.logits) for t in tokens)
        return decode(tokens)

    ctx.decode = spy
    rt = BatchedPastaRuntime(model, tok, pool_size=4096, max_batch=2,
                             forward=LlamaCppStep(ctx))
    resp = text_ids(tok, ANNOTATED[0])
    streams, anchors = replay_scripts(resp, rt.vocab)
    cfg = PastaDecodeConfig(mode="parallel", max_new_tokens=len(resp) + 1,
                            max_fork_tokens=len(resp) + 1)
    done = list(rt.run([BatchRequest(i, p, cfg, scripts=streams, replay_anchors=frozenset(
        anchors)) for i, p in enumerate(prompts)]))
    assert len(done) == 2
    fed = [(s, pos, want) for s, pos, want in asked if pos < len(prompt)]  # prompt tokens
    assert len(fed) == 2 * len(prompt)
    assert [want for _, pos, want in fed] == [pos == len(prompt) - 1 for _, pos, _ in fed]


def test_the_yardstick_in_a_fresh_process_generates_the_hf_greedy_answer(exported):
    """The demos' yardstick (`sequential_loop`: llama.cpp's own loop in a child process that
    runs nothing else) gives the HF model's greedy tokens up to the first near-tie, in a
    process other than this one, and says a child's error in one line."""
    from solm.core.errors import SolmError
    from solm.engines.llamacpp.fresh_loop import FreshProcessLoop

    model, tok, path = exported
    loop = FreshProcessLoop(path, 512, kv_type="f32")
    try:
        assert loop.proc.pid != __import__("os").getpid() and loop.proc.poll() is None
        for ids in prompt_ids(tok, TEXTS[:3]):
            ours, prefill, decode = loop.generate(ids, 24)
            ref = model.generate(torch.tensor([ids]), max_new_tokens=24, min_new_tokens=24,
                                 do_sample=False)[0, len(ids):].tolist()
            n = first_near_tie(model, ids, ref)
            assert ours[:n] == ref[:n] and n >= 8 and len(ours) == 24
            assert prefill > 0 and decode > 0
        with pytest.raises(SolmError, match="fresh process"):
            loop.generate(list(range(600)), 4)  # past the 512 cells: the child says why
    finally:
        loop.close()
    assert loop.proc.poll() is not None
    with pytest.raises(SolmError, match="did not start"):
        FreshProcessLoop(path.parent / "missing.gguf", 64)
