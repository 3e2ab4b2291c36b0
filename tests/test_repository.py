"""The repository as a product: `bench/results/` holds exactly the files the README and the
docs cite (directly, by a pattern, or through a results file they cite), every citation
resolves, and no tracked name is a work-log label."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "bench/results/"
# a results path as prose writes it: a file, a folder, or a pattern (`*`, `{a,b}`)
RESULTS_LINK = re.compile(r"bench/results/[\w./*{},-]*[\w*}/]")
# a Markdown link or image relative to the file that holds it
RELATIVE_LINK = re.compile(r"\]\((?!https?:|#|/|bench/results/)([^)#\s]+)\)")
# names that belong to a work log, not to a product: issue numbers, closing notes, CI and
# audit logs, session and run labels (i48s11, s3, round2, ...)
WORK_LOG_NAME = re.compile(
    r"(issues?[-_ ]?\d|closing[-_]?note|\bci[-_]run|\baudit|sessions?(?![a-z])(?!\.py)|"
    r"(^|[-_])i\d+s\d+|(^|[-_])s\d+($|[-_.])|scratch|\bwip\b|notebook)", re.IGNORECASE)


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return [p for p in out.splitlines() if (ROOT / p).exists()]


def expand(link: str) -> set[str] | None:
    """The files a written results path names (a folder names its README.md when it has
    one, else nothing but itself), or None when it names nothing that exists."""
    m = re.search(r"\{([^}]*)\}", link)
    if m:
        parts = [expand(link[:m.start()] + alt + link[m.end():]) for alt in m.group(1).split(",")]
        return None if any(p is None for p in parts) else set().union(*parts)
    if "*" in link:
        found = {str(p.relative_to(ROOT)) for p in ROOT.glob(link) if p.is_file()}
        return found or None
    path = ROOT / link
    if path.is_dir():
        return {str((path / "README.md").relative_to(ROOT))} if (path / "README.md").is_file() \
            else set()
    return {link} if path.is_file() else None


def citations(path: Path) -> list[tuple[str, set[str] | None]]:
    """Every results path a text cites, with the files it names."""
    text = path.read_text(errors="replace")
    out = [(link, expand(link.rstrip(".,)"))) for link in RESULTS_LINK.findall(text)]
    if str(path.relative_to(ROOT)).startswith(RESULTS):
        for rel in RELATIVE_LINK.findall(text):
            target = (path.parent / rel).resolve()
            if target.is_relative_to(ROOT / RESULTS):
                link = str(target.relative_to(ROOT))
                out.append((link, {link} if target.is_file() else None))
    return out


def cited_results() -> tuple[set[str], list[str]]:
    """The results files reached from the README and the docs, and the citations on the
    way that resolve to nothing."""
    queue = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    seen: set[str] = set()
    broken: list[str] = []
    while queue:
        source = queue.pop()
        for link, files in citations(source):
            if files is None:
                broken.append(f"{source.relative_to(ROOT)} cites {link}, which does not exist")
                continue
            for name in files - seen:
                seen.add(name)
                if name.endswith((".md", ".txt")):
                    queue.append(ROOT / name)
    return seen, broken


def test_every_results_citation_resolves():
    _, broken = cited_results()
    assert not broken, "\n".join(broken)


def test_every_results_file_is_cited():
    cited, _ = cited_results()
    uncited = sorted(p for p in tracked() if p.startswith(RESULTS) and p not in cited)
    assert not uncited, f"{len(uncited)} results files no doc cites: {uncited[:20]}"


def test_no_tracked_name_is_a_work_log_label():
    labelled = sorted({part for p in tracked() for part in Path(p).parts
                       if WORK_LOG_NAME.search(part)})
    assert not labelled, f"work-log names tracked: {labelled}"


def test_no_run_folder_is_tracked():
    """`runs/` is where commands write; what the kept models are rebuilt from lives in
    `recipes/`."""
    assert not [p for p in tracked() if p.startswith("runs/")]


@pytest.mark.parametrize("name, labelled", [
    ("issue33_audit4.json", True), ("closing_note_2026-12-05e.md", True), ("ci_run_3.log", True),
    ("i48s11", True), ("bench_intel_s3", True), ("session_notes.md", True),
    ("step_cost_shared_avx512.json", False), ("pasta_recipes", False), ("prefs_rounds", False),
    ("tip_engines_2k.json", False), ("sessions.py", False), ("test_serve.py", False),
])
def test_the_work_log_pattern_tells_labels_from_product_names(name, labelled):
    assert bool(WORK_LOG_NAME.search(name)) == labelled


def test_citations_expand_by_the_rules():
    """A pattern with no match, a missing file and a folder without README resolve as stated."""
    assert expand("bench/results/no-such-file.json") is None
    assert expand("bench/results/*.no-such-extension") is None
    assert expand("bench/results/{pasta_eval_cpu.md,no-such.md}") is None
    assert expand("bench/results/pasta_eval_cpu.md") == {"bench/results/pasta_eval_cpu.md"}


def test_no_cited_results_file_reads_as_a_work_log():
    """What the docs cite is a record of measurements, not of who worked when."""
    housekeeping = re.compile(r"(\bissues?[-_ ]?#?\d+|\bsessions?\b(?!\.py|\.run)|\blent\b|"
                              r"closing note)", re.IGNORECASE)
    cited, _ = cited_results()
    hits = {name: sorted({m.lower() for m in housekeeping.findall((ROOT / name).read_text())})
            for name in cited if name.endswith((".md", ".txt"))}
    assert not {k: v for k, v in hits.items() if v}


def test_every_cli_module_stays_short():
    """A command group grows by a module per command, not by one long file."""
    long = {p.name: n for p in (ROOT / "solm" / "cli").glob("*.py")
            if (n := len(p.read_text().splitlines())) >= 450}
    assert not long, long


def test_no_tracked_source_or_doc_names_an_issue():
    """Code, comments, Makefile, configs and docs explain the product, not its work log."""
    issue = re.compile(r"\bissues?[-_ ]?#?\d+", re.IGNORECASE)
    hits = []
    for name in tracked():
        if name.startswith(("bench/results/", "recipes/", "tests/data/")) or name in (
                "tests/test_repository.py", "tests/test_docs.py"):
            continue
        if not name.endswith((".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg")) \
                and name not in ("Makefile", ".ci/run"):
            continue
        text = (ROOT / name).read_text(errors="replace")
        hits += [f"{name}: {m.group(0)}" for m in issue.finditer(text)]
    assert not hits, hits[:20]
