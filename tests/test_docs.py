"""The docs site: built strictly, covering every command and subpackage, naming no issue,
session or machine loan, and backing every figure with a results file that states its CPU."""

from __future__ import annotations

import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# what the issue tracker and the workplace's machine loans leave in prose
HOUSEKEEPING = re.compile(r"(\bissues?[-_ ]?#?\d+|\bsessions?\b(?!\.py)|\blent\b|\bloaned?\b|"
                          r"\bwaves?\b)", re.IGNORECASE)
CPU_NAME = re.compile(r"(AMD EPYC|Intel|Xeon|Sapphire Rapids|Ryzen|Apple M\d|NVIDIA|H100|H200|"
                      r"A100|CPU)")
RESULTS_LINK = re.compile(r"bench/results/[\w./*{},-]+")
# a measured figure: a number with a unit or a ratio (1.29x, 105 ms, 46.4 tok/s, 77%)
FIGURE = re.compile(r"\d(\.\d+)?\s*(x|×|ms|s\b|tok/s|tokens/s|%|GB/s|MB)", re.IGNORECASE)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def included(page: Path) -> str:
    """A page's text with its `--8<--` snippets expanded (what the site shows)."""
    out = []
    for line in page.read_text().splitlines():
        m = re.match(r'\s*--8<--\s+"([^"]+)"', line)
        out.append((ROOT / m.group(1)).read_text() if m else line)
    return "\n".join(out)


def test_readme_is_short_and_points_at_the_docs():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "docs/" in text and "make docs" in text


@pytest.mark.parametrize("path", [ROOT / "README.md", *pages()], ids=lambda p: p.name)
def test_no_issue_session_or_machine_loan_is_named(path):
    hits = [m.group(0) for m in HOUSEKEEPING.finditer(included(path) if path.is_relative_to(
        DOCS) else path.read_text())]
    assert not hits, f"{path.relative_to(ROOT)} names {sorted(set(hits))}"


def exists(link: str) -> bool:
    """A results path as the docs write it: a file, a folder, or a pattern (`*`, `{a,b}`)
    that matches at least one file."""
    m = re.search(r"\{([^}]*)\}", link)
    if m:
        return all(exists(link[:m.start()] + alt + link[m.end():])
                   for alt in m.group(1).split(","))
    return any(ROOT.glob(link)) if "*" in link else (ROOT / link).exists()


def tables(text: str) -> list[list[str]]:
    """The Markdown tables of a text, each as its lines."""
    out, current = [], []
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            current.append(line)
        elif current:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_table_of_figures_names_its_cpu_and_results_file(page):
    """A table with measured figures sits in a text that links its `bench/results` file
    and names the CPU (or GPU) it was measured on; the results file exists."""
    text = included(page)
    measured = [t for t in tables(text) if any(FIGURE.search(row) for row in t[2:])]
    if not measured:
        return
    links = RESULTS_LINK.findall(text)
    assert links, f"{page.name}: figures without a bench/results file"
    for link in links:
        assert exists(link.rstrip(".,)")), f"{page.name}: {link} does not exist"
    assert CPU_NAME.search(text), f"{page.name}: figures without the CPU they ran on"


def test_every_subpackage_has_an_api_page():
    import solm

    api = (DOCS / "reference" / "api.md").read_text()
    documented = set(re.findall(r"^::: (solm(?:\.\w+)*)", api, re.MULTILINE))
    subpackages = {f"solm.{m.name}" for m in pkgutil.iter_modules(solm.__path__)
                   if m.ispkg}
    assert subpackages and subpackages <= documented, subpackages - documented


def test_the_command_reference_covers_every_command():
    """Every command and group of the typer app, walked independently of the generator,
    has its section in the generated reference, with each of its options."""
    import typer

    from solm.cli.main import app
    from solm.cli.reference import command_reference

    text = command_reference()
    assert "<!-- solm: command reference -->" in (DOCS / "reference" / "commands.md").read_text()
    seen = 0

    def walk(cmd, path):
        nonlocal seen
        seen += 1
        heading = re.search(rf"^#+ `{re.escape(' '.join(path))}`$", text, re.MULTILINE)
        assert heading, path
        section = text[heading.end():].split("\n#", 1)[0]
        for param in cmd.params:
            for opt in param.opts:
                if opt.startswith("-") and not getattr(param, "hidden", False):
                    assert opt in section, (path, opt)
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, path + [name])

    walk(typer.main.get_command(app), ["solm"])
    assert seen > 40


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: a broken link, a missing page or snippet, a failed API
    reference fails it."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("mkdocs is not installed: `make setup` installs the docs extra")
    r = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict",
                        "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "commands" / "index.html").exists()
