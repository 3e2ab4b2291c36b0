import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from solm.core import models
from solm.core.errors import SolmError


class _FakeLoaded:
    """Stands in for a dequantized GGUF model: saving writes a file, optionally slowly or failing."""

    def __init__(self, fail=False, delay=0.0):
        self.fail, self.delay = fail, delay
        self.hf_quantizer = object()
        self.config = type("C", (), {})()
        self.config.quantization_config = {}

    def save_pretrained(self, folder, safe_serialization=True):
        Path(folder, "model.safetensors").write_bytes(b"\0" * 1024)
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("disk full")
        Path(folder, "config.json").write_text("{}")


def _patch(monkeypatch, fake):
    import transformers
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: fake)
    tok = type("T", (), {"save_pretrained": lambda self, f: Path(f, "tokenizer.json")
                         .write_text("{}")})()
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)


def test_interrupted_conversion_leaves_no_loadable_folder(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    target = tmp_path / "cache" / "m"
    target.parent.mkdir()
    _patch(monkeypatch, _FakeLoaded(fail=True))
    with pytest.raises(RuntimeError):
        models.convert_gguf(gguf, target)
    assert not target.exists()
    assert not [p for p in target.parent.iterdir() if ".tmp-" in p.name]
    _patch(monkeypatch, _FakeLoaded())
    models.convert_gguf(gguf, target)
    assert models.is_complete_folder(target)


@pytest.mark.slow
def test_killed_conversion_process_is_redone(tmp_path):
    """A conversion process killed mid-write; the folder is not complete, and a rerun fixes it."""
    target = tmp_path / "cache" / "m"
    target.parent.mkdir()
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        import transformers
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_models import _FakeLoaded
        from solm.core import models
        fake = _FakeLoaded(delay=float(sys.argv[1]))
        transformers.AutoModelForCausalLM.from_pretrained = lambda *a, **k: fake
        tok = type("T", (), {{"save_pretrained": lambda self, f: Path(f, "tokenizer.json").write_text("{{}}")}})()
        transformers.AutoTokenizer.from_pretrained = lambda *a, **k: tok
        models.convert_gguf(Path({str(gguf)!r}), Path({str(target)!r}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, "30"])
    deadline = time.time() + 600  # a busy machine's imports can take minutes
    while proc.poll() is None and time.time() < deadline and not any(
            ".tmp-" in p.name for p in target.parent.iterdir()):
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not models.is_complete_folder(target)
    subprocess.run([sys.executable, "-c", script, "0"], check=True)
    assert models.is_complete_folder(target)


def test_unknown_model_gives_clear_offline_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SolmError, match="no-such-org/no-such-model"):
        models.load_model("no-such-org/no-such-model")


def test_dtype_policy():
    assert models.resolve_dtype("fp32") is torch.float32
    assert models.resolve_dtype("bf16") is torch.bfloat16
    auto = models.resolve_dtype("auto", "cpu")
    assert auto is (torch.bfloat16 if models.cpu_has_fast_bf16() else torch.float32)
    with pytest.raises(SolmError):
        models.resolve_dtype("int3")


@pytest.mark.slow
def test_embedded_model_answers_paris_and_reloads_from_the_cache(monkeypatch):
    from solm.core.chat import prompt_ids
    models.load_model("smollm2-135m", dtype="fp32")  # first load: converts if needed

    def no_conversion(*args, **kwargs):
        raise AssertionError("the second load converted the GGUF again")

    monkeypatch.setattr(models, "convert_gguf", no_conversion)
    model, tok = models.load_model("smollm2-135m", dtype="fp32")  # second load: the cache
    ids = torch.tensor([prompt_ids(tok, "What is the capital of France?")])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20,
                         do_sample=False)
    answer = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


def kept_models() -> list[str]:
    from solm.core.models import ARTIFACTS

    return sorted(ARTIFACTS)


@pytest.mark.parametrize("name", kept_models())
def test_kept_models_are_small_and_load_by_name(name):
    from solm.core.models import ARTIFACTS_DIR, load_model

    folder = ARTIFACTS_DIR / name
    for p in folder.iterdir():  # kept in the repository: no file over 5 MB
        assert p.stat().st_size < 5e6, f"{p}: {p.stat().st_size / 1e6:.1f} MB"
    assert not (folder / "adapter_model.safetensors").exists()  # full weights: cache only
    model, tok = load_model(name, dtype="fp32", device="cpu")
    from solm.core.models import model_system

    # a tag of its system (the Dense baseline carries TIP's registers, unused)
    tag = "<reg_0>" if model_system(name) in ("tip", "dense") else "<sync/>"
    assert tag in tok.get_vocab() and model.get_input_embeddings().weight.shape[0] == len(tok)


def test_solm_models_says_how_each_kept_model_is_stored_or_how_to_make_it(tmp_path,
                                                                          monkeypatch):
    """Every kept model in this repository is listed as stored, as an adapter or as a
    difference from its base (by its files); one missing names its own make target."""
    from typer.testing import CliRunner

    from solm.cli.main import app
    from solm.core.models import ARTIFACT_TARGETS, ARTIFACTS, ARTIFACTS_DIR, artifact_state

    for name in ARTIFACTS:
        files = {p.name for p in (ARTIFACTS_DIR / name).iterdir()}
        kind = "difference from its base" if "delta.json" in files else "adapter in"
        assert artifact_state(name).startswith(kind), (name, artifact_state(name))
    result = CliRunner().invoke(app, ["models"])
    text = " ".join(result.output.split())  # rich wraps lines to the terminal
    assert result.exit_code == 0 and "not built" not in text, result.output
    assert all(f"{name}:" in text for name in ARTIFACTS)
    monkeypatch.setattr(models, "ARTIFACTS_DIR", tmp_path)
    for name in ARTIFACTS:
        assert artifact_state(name) == f"not built (make {ARTIFACT_TARGETS[name]})"
    text = " ".join(CliRunner().invoke(app, ["models"]).output.split())
    assert text.count("not built (make ") == len(ARTIFACTS)


def test_models_load_without_hub_kernels(tiny_folder):
    """transformers turns hub kernels on wherever the `kernels` package is installed and
    fetches them from the hub (an offline CUDA machine fails there, measured on an H200);
    solm's runtimes are proven against transformers' own layers, so they stay off."""
    from transformers import AutoModelForCausalLM

    from solm.core.models import load_model

    assert AutoModelForCausalLM.from_pretrained(tiny_folder).use_kernels  # what it would do
    model, _ = load_model(tiny_folder, dtype="fp32")
    assert not model.use_kernels
