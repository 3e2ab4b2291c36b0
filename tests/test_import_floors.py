"""solm's packages stand on floors, and an import only ever goes down or across a floor
(function-level imports included): a helper two packages share lives on the lower one's
floor. And no module imports itself back through others (no import circle), lazily or not.

    core  <  data, annotate  <  engines  <  decode  <  train  <  prefs, eval, judge  <  serve  <  cli

The engines sit below the runtimes: a runtime asks an engine for its forward step, never the
reverse. Each engine is one folder under `solm/engines/` and reads no other engine's folder.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "solm"
FLOORS = {"core": 0, "data": 1, "annotate": 1, "engines": 2, "decode": 3, "train": 4, "prefs": 5,
          "eval": 5, "judge": 5, "serve": 6, "cli": 7}
ENGINES = ("torch", "llamacpp", "onnxruntime")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every solm module `path` imports, at any depth of its code."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("solm")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("solm"):
                out.add(name)
                # `from solm.x import y` may name a submodule y
                out |= {f"{name}.{a.name}" for a in node.names}
    return out


def the_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m in imports_of(path) if m in modules and m != name}
    return graph


def floor(module: str) -> int | None:
    parts = module.split(".")
    return FLOORS.get(parts[1]) if len(parts) > 1 else None


def test_every_package_has_a_floor():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()
                or (p.is_dir() and any(p.glob("*.py")))}
    assert packages <= set(FLOORS) | {"artifacts"}, packages - set(FLOORS)


def test_imports_go_down_or_across_a_floor():
    upward = sorted(f"{a} -> {b}" for a, deps in the_graph().items() for b in deps
                    if floor(a) is not None and floor(b) is not None and floor(b) > floor(a))
    assert not upward, "imports from a higher floor:\n" + "\n".join(upward)


def engine_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "engines" and parts[2] in ENGINES else None


def test_each_engine_is_one_folder_that_reads_no_other_engines():
    assert {p.name for p in (ROOT / "engines").iterdir() if p.is_dir()
            and p.name != "__pycache__"} == set(ENGINES)
    crossing = sorted(f"{a} -> {b}" for a, deps in the_graph().items() for b in deps
                      if engine_of(a) and engine_of(b) and engine_of(a) != engine_of(b))
    assert not crossing, "an engine reads another's folder:\n" + "\n".join(crossing)


def test_no_import_circle():
    graph = the_graph()
    state: dict[str, int] = {}
    circles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not circles, "import circles:\n" + "\n".join(circles)


@pytest.mark.parametrize("source,expected", [
    ("from solm.core import jsonl\n", {"solm.core", "solm.core.jsonl"}),
    ("def f():\n    from solm.decode.pasta.runtime import X\n",
     {"solm.decode.pasta.runtime", "solm.decode.pasta.runtime.X"}),
    ("import solm.train.base\n", {"solm.train.base"}),
])
def test_the_reader_finds_imports_at_any_depth(tmp_path, source, expected, monkeypatch):
    pkg = tmp_path / "solm" / "eval"
    pkg.mkdir(parents=True)
    f = pkg / "m.py"
    f.write_text(source)
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path / "solm")
    assert imports_of(f) == expected
