"""MkDocs hooks: the command reference is generated from the typer app at build time
(`solm.cli.reference`), so it cannot drift from `--help`; the plots under `bench/results/`
are served at the same paths, so the results files the docs include show them as they are."""

from pathlib import Path

from mkdocs.structure.files import File

MARKER = "<!-- solm: command reference -->"
ROOT = Path(__file__).resolve().parents[1]
PLOTS = ("*.png", "*.svg")


def on_files(files, config):
    for pattern in PLOTS:
        for path in sorted((ROOT / "bench" / "results").rglob(pattern)):
            files.append(File(str(path.relative_to(ROOT)), str(ROOT), config["site_dir"],
                              config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    from solm.cli.reference import command_reference

    return markdown.replace(MARKER, command_reference())
