"""Bad input at the command line: one line naming the option or file, a non-zero exit, no
traceback, and nothing already written is touched."""

import json
import os
import shutil

import pytest

from solm.core.errors import SolmError
from typer.testing import CliRunner

from solm.cli import main as solm_main
from solm.cli import pasta, tip
from solm.core.models import artifact_folder

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    prompts = d / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": "hi", "response": "Hello there."}) + "\n")
    other = d / "other.jsonl"
    other.write_text(json.dumps({"a": 1}) + "\n")
    (d / "folder.jsonl").mkdir()
    (d / "emptymodel").mkdir()
    (d / "empty.jsonl").write_text("")
    (d / "noprompt.jsonl").write_text(json.dumps({"id": "t", "response": "<reg_0>x"}) + "\n")
    (d / "utf8.jsonl").write_bytes(b'{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt": "\xff"}\n')
    (d / "utf8d.jsonl").write_bytes(json.dumps({"annotated": "x", "content_tokens": 1,
                                                "critical_path": 1}).encode() + b"\n\xfe\n")
    (d / "badgain.jsonl").write_text(
        json.dumps({"id": "a", "annotated": None, "promises": 0, "gain": 1.0}) + "\n"
        + json.dumps({"id": "b", "annotated": "x", "promises": 2, "gain": "fast"}) + "\n")
    (d / "dupes.jsonl").write_text(json.dumps({"id": 1, "prompt": "a"}) + "\n"
                                   + json.dumps({"id": "1", "prompt": "b"}) + "\n")
    (d / "hello.jsonl").write_text(json.dumps({"id": "m", "messages": "hello"}) + "\n")
    (d / "blank.jsonl").write_text(json.dumps({"id": "e", "prompt": "  "}) + "\n")
    (d / "decoded.jsonl").write_text(json.dumps({"id": "a", "response": "x"}) + "\n")
    (d / "decoded.jsonl.manifest.json").write_text('{"row_settings": {"model": ')
    (d / "bad.yaml").write_text("limit: [1, 2\nmode: x\n")
    (d / "afile").write_text("not a folder")
    adapter = d / "badadapter"
    shutil.copytree(artifact_folder("tip-sft-cpu"), adapter)  # a LoRA kept model
    (adapter / "adapter_model.safetensors").write_bytes(b"garbage, not safetensors")
    return d


CASES = [
    # (app, args, what the one line must name)
    (pasta, ["decode", "--limit", "0"], "--limit"),
    (pasta, ["decode", "--limit", "-1"], "--limit"),
    (pasta, ["decode", "--max-new-tokens", "0"], "--max-new-tokens"),
    (pasta, ["decode", "--temperature", "-1"], "--temperature"),
    (pasta, ["decode", "--top-p", "0"], "--top-p"),
    (pasta, ["decode", "--no-repeat-ngram", "-3"], "--no-repeat-ngram"),
    (pasta, ["decode", "--repetition-penalty", "0"], "--repetition-penalty"),
    (pasta, ["decode", "--penalize", "main"], "--penalize"),
    (pasta, ["decode", "--mode", "fast"], "--mode"),
    (pasta, ["decode", "--device", "tpu"], "--device"),
    (pasta, ["decode", "--dtype", "int3"], "--dtype"),
    (pasta, ["decode", "-p", "{d}/folder.jsonl", "-o", "{d}/o.jsonl"], "folder.jsonl"),
    (pasta, ["decode", "-p", "{d}/prompts.jsonl", "-o", "{d}/prompts.jsonl"], "prompts.jsonl"),
    (pasta, ["decode", "-p", "{d}/prompts.jsonl", "-o", "{d}/o.jsonl", "-m", "{d}/emptymodel"],
     "emptymodel"),
    (pasta, ["stats", "{d}/other.jsonl"], "other.jsonl:1"),
    (pasta, ["annotate", "-i", "{d}/prompts.jsonl", "-o", "{d}/prompts.jsonl"], "prompts.jsonl"),
    (pasta, ["annotate", "-i", "{d}/prompts.jsonl", "-o", "{d}/a.jsonl", "--rejects",
             "{d}/prompts.jsonl"], "prompts.jsonl"),
    (pasta, ["annotate", "-i", "{d}/folder.jsonl", "-o", "{d}/a.jsonl"], "folder.jsonl"),
    (pasta, ["annotate", "-i", "{d}/prompts.jsonl", "-o", "/proc/no/such/a.jsonl"], "/proc/no"),
    (pasta, ["sft", "-d", "{d}/prompts.jsonl", "-o", "{d}/s", "--lr", "0"], "--lr"),
    (pasta, ["sft", "-d", "{d}/prompts.jsonl", "-o", "{d}/s", "--precision", "fp8"],
     "--precision"),
    (pasta, ["nope"], "nope"),
    (tip, ["traces", "-o", "{d}/t.jsonl", "--registers", "0"], "--registers"),
    (tip, ["traces", "-o", "{d}/t.jsonl", "--registers", "-2"], "--registers"),
    (tip, ["decode", "-p", "{d}/prompts.jsonl", "--page-size", "0"], "--page-size"),
    (tip, ["decode", "-p", "{d}/prompts.jsonl", "--policy", "nope"], "--policy"),
    (tip, ["bench", "-t", "{d}/prompts.jsonl", "--policies", "dense,nope"], "nope"),
    (solm_main, ["prepare", "--model", "{d}/prompts.jsonl"], "prompts.jsonl"),
    (pasta, ["serve", "--port", "0"], "--port"),
    (pasta, ["serve", "--mode", "fast"], "--mode"),
    (solm_main, ["serve", "--max-queue", "0"], "--max-queue"),
    (solm_main, ["serve", "--temperature", "3"], "--temperature"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "beam=x"], "beam=x"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "sot=x", "--baseline", "nope"],
     "--baseline nope"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "sot=x", "--method", "sot=y"],
     "label"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "sot=x", "--reference",
             "{d}/missing.json"], "missing.json"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "sot=x", "--judge-mode", "vibes"],
     "--judge-mode"),
    (pasta, ["eval", "winrate", "--annotations", "{d}/other.jsonl"], "other.jsonl:1"),
    (pasta, ["eval", "winrate", "--annotations", "{d}/missing.json"], "missing.json"),
    (pasta, ["eval", "report", "{d}"], "run.json"),
    (pasta, ["judge", "-b", "{d}/prompts.jsonl", "-m", "{d}/other.jsonl", "-o", "{d}/j.jsonl"],
     "other.jsonl:1"),
    (pasta, ["judge", "-b", "{d}/prompts.jsonl", "-m", "{d}/prompts.jsonl", "-o",
             "{d}/j.jsonl", "--judge", "claude:x"], "claude:x"),
    (pasta, ["sft", "--data", "{d}/prompts.jsonl", "--out", "{d}/o", "--attention", "xla"],
     "--attention"),
    # inputs that commands used to destroy (the same-path sweep covers every command)
    (pasta, ["bench", "-a", "{d}/prompts.jsonl", "-o", "{d}/prompts.jsonl"], "prompts.jsonl"),
    (tip, ["bench", "-t", "{d}/prompts.jsonl", "-o", "{d}/prompts.jsonl"], "prompts.jsonl"),
    (tip, ["traces", "--source", "{d}/prompts.jsonl", "-o", "{d}/prompts.jsonl"],
     "prompts.jsonl"),
    # tracebacks
    (pasta, ["decode", "--temperature", "inf"], "--temperature"),
    (pasta, ["decode", "--temperature", "nan"], "--temperature"),
    (pasta, ["decode", "-p", "{d}/prompts.jsonl", "-o", "{d}/o.jsonl", "-m",
             "{d}/badadapter"], "adapter_model.safetensors"),
    (tip, ["bench", "-t", "{d}/empty.jsonl"], "empty.jsonl"),
    (tip, ["bench", "-t", "{d}/noprompt.jsonl"], "noprompt.jsonl:1 [field 'prompt']"),
    # errors that named no path or field
    (pasta, ["decode", "-p", "{d}/utf8.jsonl", "-o", "{d}/o.jsonl"], "utf8.jsonl:2"),
    (pasta, ["stats", "{d}/utf8d.jsonl"], "utf8d.jsonl:2"),
    (pasta, ["stats", "{d}/badgain.jsonl"], "badgain.jsonl:2 [field 'gain']"),
    (pasta, ["mix", "{d}/badgain.jsonl", "--min-gain", "1.2", "-o", "{d}/mix.jsonl"],
     "badgain.jsonl:2 [field 'gain']"),
    (pasta, ["decode", "-p", "{d}/prompts.jsonl", "-o", "{d}/decoded.jsonl"],
     "decoded.jsonl.manifest.json"),
    (pasta, ["decode", "-p", "{d}/hello.jsonl", "-o", "{d}/o.jsonl"],
     "hello.jsonl:1 [field 'messages']"),
    (pasta, ["decode", "-p", "{d}/prompts.jsonl", "-o", "{d}/afile/o.jsonl"], "afile"),
    (pasta, ["annotate", "-i", "{d}/prompts.jsonl", "-o", "{d}/afile/o.jsonl"], "afile"),
    (pasta, ["decode", "--seed", "99999999999999999999999"], "--seed"),
    (pasta, ["decode", "--seed", "-1"], "--seed"),
    (pasta, ["decode", "--config", "{d}/bad.yaml"], "bad.yaml:2"),
    (pasta, ["chat", "--config", "{d}/bad.yaml"], "bad.yaml:2"),
    # accepted silently before
    (pasta, ["decode", "--repetition-penalty", "inf"], "--repetition-penalty"),
    (pasta, ["decode", "--max-new-tokens", "100000000000000000000000"], "--max-new-tokens"),
    (pasta, ["decode", "-p", "{d}/blank.jsonl", "-o", "{d}/o.jsonl"],
     "blank.jsonl:1 [field 'prompt']"),
    (pasta, ["decode", "-p", "{d}/empty.jsonl", "-o", "{d}/o.jsonl"], "nothing was decoded"),
    (pasta, ["annotate", "-i", "{d}/empty.jsonl", "-o", "{d}/o.jsonl"], "nothing was done"),
    (tip, ["decode", "-p", "{d}/empty.jsonl", "-o", "{d}/o.jsonl"], "nothing was decoded"),
    (pasta, ["judge", "-b", "{d}/empty.jsonl", "-m", "{d}/prompts.jsonl", "-o",
             "{d}/j.jsonl"], "empty.jsonl"),
    # duplicate ids (1 and "1" are one id)
    (pasta, ["decode", "-p", "{d}/dupes.jsonl", "-o", "{d}/o.jsonl"], "dupes.jsonl:2 [field 'id']"),
    (pasta, ["annotate", "-i", "{d}/dupes.jsonl", "-o", "{d}/o.jsonl"], "dupes.jsonl:2"),
    (tip, ["decode", "-p", "{d}/dupes.jsonl", "-o", "{d}/o.jsonl"], "dupes.jsonl:2"),
    (solm_main, ["serve", "--temperature", "inf"], "--temperature"),
    (solm_main, ["serve", "--seed", "99999999999"], "--seed"),
    (pasta, ["eval", "run", "-o", "{d}/run", "--method", "sot=x", "--temperature", "inf"],
     "--temperature"),
]
if not os.environ.get("CUDA_VISIBLE_DEVICES") and not __import__("torch").cuda.is_available():
    CASES.append((pasta, ["decode", "--device", "cuda"], "--device"))


@pytest.mark.parametrize("app,args,names", CASES,
                         ids=[" ".join(a[:3]) for _, a, _ in CASES])
def test_bad_input_is_one_line_and_a_nonzero_exit(files, app, args, names):
    args = [a.format(d=files) for a in args]
    before = snapshot(files)
    r = runner.invoke(app.app, args + (["-q"] if args[0] in ("decode", "annotate") else []))
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code != 0, r.output
    assert {p: b for p, b in snapshot(files).items() if p in before} == before
    assert "Traceback" not in r.output and not isinstance(r.exception, (KeyError,
                                                                          ZeroDivisionError))
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert names.format(d=files) in lines[0]


def snapshot(folder) -> dict:
    """Every file under `folder` with its bytes (inputs must come out byte for byte)."""
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_dedupe_keeps_each_ids_first_row_and_counts_the_rest(files):
    from solm.core.records import load_records

    dropped: list[str] = []
    rows = list(load_records(files / "dupes.jsonl", duplicates=dropped))
    assert [(r.id, r.prompt) for r in rows] == [("1", "a")] and dropped == ["1"]


def test_a_refused_rerun_leaves_the_output_as_it_was(files):
    out = files / "kept.jsonl"
    out.write_text('{"id": "a", "response": "done before"}\n')
    before = out.read_bytes()
    for bad in (["--limit", "0"], ["--temperature", "-1"], ["--penalize", "x"]):
        r = runner.invoke(pasta.app, ["decode", "-p", str(files / "prompts.jsonl"), "-o",
                                      str(out), *bad])
        assert r.exit_code != 0
    assert out.read_bytes() == before


def test_version():
    for app in (pasta, tip, solm_main):
        r = runner.invoke(app.app, ["--version"])
        assert r.exit_code == 0 and r.output.startswith("solm ")


def test_every_command_has_config_quiet_and_debug():
    """The README promises `--config`, `--quiet` and `--debug` on every command."""
    import inspect

    def walk(app, path=()):
        for c in app.registered_commands:
            yield " ".join((*path, c.name or c.callback.__name__)), c.callback
        for g in app.registered_groups:
            yield from walk(g.typer_instance, (*path, g.name))

    missing = {name: sorted({"config", "quiet", "debug"} - set(inspect.signature(fn).parameters))
               for name, fn in walk(solm_main.app)}
    assert not {k: v for k, v in missing.items() if v}
    assert len(missing) > 15


# ---- what a new user met ---------------------------------------------------------

def _no_model_load(monkeypatch):
    import solm.core.models as models

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr(models, "load_decoder", refuse)
    monkeypatch.setattr(models, "load_model", refuse)


def test_a_tip_server_refuses_what_llama_cpp_cannot_run_before_loading(monkeypatch):
    """`serve --system tip --engine llama.cpp --policy h2o` said "needs --budget" after
    loading; --budget had no default there while `tip decode`'s is 2048."""
    from solm.decode.registry import decode_system

    _no_model_load(monkeypatch)
    r = CliRunner().invoke(solm_main.app, ["serve", "--system", "tip", "--engine", "llama.cpp",
                                           "--policy", "h2o"])
    assert r.exit_code != 0 and "h2o" in r.output and "attention" in r.output.lower(), r.output
    assert "needs --budget" not in r.output
    assert "loading" not in r.output  # refused before the server starts loading anything
    tip_defaults = decode_system("tip").command_defaults
    assert tip_defaults["budget"] == 2048 and tip_defaults["temperature"] == 0.6


def test_a_tip_server_samples_as_tip_decode_does(monkeypatch):
    """`tip decode` sampled at temperature 0.6 while a TIP server was greedy: one default."""
    import solm.serve.systems as systems

    seen = {}

    def capture(system, model, opts, decoding, dtype, device):
        seen.update(decoding.values, budget=opts["budget"])
        raise SystemExit(0)

    monkeypatch.setattr(systems, "make_engine", capture)
    CliRunner().invoke(solm_main.app, ["serve", "--system", "tip"])
    assert seen["temperature"] == 0.6 and seen["top_p"] == 0.95 and seen["budget"] == 2048
    seen.clear()
    CliRunner().invoke(solm_main.app, ["serve", "--system", "pasta"])
    assert seen["temperature"] == 0.0


@pytest.mark.parametrize("engine", ["torch", "onnxruntime"])
def test_gguf_type_on_an_engine_that_reads_no_gguf_is_refused(engine, monkeypatch):
    _no_model_load(monkeypatch)
    r = CliRunner().invoke(pasta.app, ["decode", "Hi", "--engine", engine, "--gguf-type", "f32"])
    assert r.exit_code == 2 and "--gguf-type" in r.output and engine in r.output, r.output
    assert "llama.cpp" in r.output


def test_open_ranges_read_the_same_in_help_error_and_check():
    """--top-p: help said [x<=1.0], the error "must be > 0", README "(0, 1]"."""
    import re

    from solm.core.sampling import SamplingConfig

    r = CliRunner().invoke(pasta.app, ["decode", "--help"], env={"COLUMNS": "240"})
    flat = re.sub(r"\s+", " ", r.output)
    assert "Must be in (0, 1]." in flat and "x<=1.0" not in flat
    for bad in ("0", "1.5", "-0.2"):
        r = CliRunner().invoke(pasta.app, ["decode", "Hi", "--top-p", bad])
        assert r.exit_code == 2 and "must be in (0, 1]" in r.output, r.output
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\], got 0"):
        from solm.core.settings import check_settings
        check_settings(SamplingConfig(top_p=0))


def test_help_shows_no_literal_backticks():
    """`tip bench --help` showed literal backticks (a newline inside a code span)."""
    for app, cmd in [(tip.app, ["bench", "--help"]), (tip.app, ["decode", "--help"]),
                     (pasta.app, ["bench", "--help"]), (solm_main.app, ["check-engines",
                                                                        "--help"])]:
        r = CliRunner().invoke(app, cmd, env={"COLUMNS": "240"})
        assert r.exit_code == 0 and "`" not in r.output, (cmd, r.output)


def test_the_cache_reports_its_size_and_cleans_one_kind(tmp_path, monkeypatch):
    """A new user's trial: the cache grew to 2.1 GB with no report and no way to clean it."""
    monkeypatch.setenv("SOLM_CACHE", str(tmp_path))
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "m-q8_0-abc.gguf").write_bytes(b"x" * 3000)
    (tmp_path / "gguf" / "m-q8_0-abc.gguf.lock").write_bytes(b"")
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / "model.safetensors").write_bytes(b"y" * 5000)
    r = CliRunner().invoke(solm_main.app, ["cache", "show"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{"):])
    assert report["kinds"]["gguf"]["entries"] == {"m-q8_0-abc.gguf": 3000}
    assert report["kinds"]["models"]["bytes"] == 5000 and report["bytes"] == 8000
    r = CliRunner().invoke(solm_main.app, ["cache", "clean"])
    assert r.exit_code != 0 and "--gguf" in r.output
    r = CliRunner().invoke(solm_main.app, ["cache", "clean", "--gguf"])
    assert r.exit_code == 0 and not (tmp_path / "gguf").exists()
    assert (tmp_path / "models" / "m" / "model.safetensors").exists()


def test_auto_names_the_engine_it_chose_and_why(monkeypatch):
    import solm.core.notices as notices
    import solm.engines as engines
    import solm.engines.llamacpp.binding as binding

    said = []
    monkeypatch.setattr(notices, "_LISTENERS", [])
    notices.listen(said.append)
    llama = engines.ENGINES["llama.cpp"]
    ort = engines.ENGINES["onnxruntime"]
    monkeypatch.setattr(llama, "refusal", lambda system, **facts: facts.get("why"))
    monkeypatch.setattr(ort, "unavailable", lambda: None)
    # nothing measured: llama.cpp where it runs the decode, else onnxruntime, else torch
    assert engines.choose("auto", "pasta", why="a reason it cannot") == "onnxruntime"
    monkeypatch.setattr(ort, "unavailable", lambda: "onnxruntime is not installed")
    assert engines.choose("auto", "pasta", why="a reason it cannot") == "torch"
    monkeypatch.setattr(binding, "llama_cpp_available", lambda: False)
    assert engines.choose("auto", "pasta") == "torch"
    with pytest.raises(SolmError, match="--engine llama.cpp: llama-cpp-python is not installed"):
        engines.choose("llama.cpp", "pasta")
    monkeypatch.setattr(binding, "llama_cpp_available", lambda: True)
    assert engines.choose("auto", "pasta") == "llama.cpp"
    assert engines.choose("torch", "pasta", why="a reason it cannot") == "torch"
    with pytest.raises(SolmError, match="--engine llama.cpp: a reason it cannot"):
        engines.choose("llama.cpp", "pasta", why="a reason it cannot")
    assert said[-4:] == ["--engine auto: onnxruntime, since llama.cpp cannot run this decode "
                         "(a reason it cannot)",
                         "--engine auto: torch, since llama.cpp cannot run this decode (a reason "
                         "it cannot); onnxruntime is not installed",
                         "--engine auto: torch, since llama-cpp-python is not installed; "
                         "onnxruntime is not installed",
                         "--engine auto: llama.cpp (installed, and able to run this decode)"]
