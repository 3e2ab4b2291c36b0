"""solm's packages stand on floors, and an import only ever goes down or across a floor
(function-level imports included): a helper two packages share lives on the lower one's
floor. And no module imports itself back through others (no import circle), lazily or not.

    core  <  data, annotate, llamacpp  <  decode, engines, onnxrt  <  train  <  prefs, eval, judge  <  serve  <  cli
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "solm"
FLOORS = {"core": 0, "data": 1, "annotate": 1, "llamacpp": 1, "decode": 2, "engines": 2, "onnxrt": 2, "train": 3, "prefs": 4,
          "eval": 4, "judge": 4, "serve": 5, "cli": 6}


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
