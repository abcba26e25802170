"""Build-time steps of the docs site (mkdocs.yml `hooks:`), so that no page can drift from the code or the records.

- The settings reference: `<!-- settings: COMMAND -->` in a page becomes the tables of COMMAND's settings, made from
  the same dataclasses, sections, types and defaults that `lopti COMMAND --help` prints.
- The records: results/ (outside docs/) is published under the site's results/, so the pages link to it as
  `../results/...` both on the repository and in the site; such links are rewritten to the published copy. What git
  ignores there (a study's weights, checkpoints and logs, gigabytes beside its records) is left out.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import subprocess
from pathlib import Path

import yaml
from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).parent
RECORDS = ROOT / "results"
MARKER = re.compile(r"<!-- settings: ([a-z ]+) -->")
RECORD_LINK = re.compile(r"\]\(((?:\.\./)+results/[^)#\s]*)(#[^)\s]*)?\)")


def _cell(text: str) -> str:
    """Return `text` safe inside a markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _shown(value) -> str:
    """Return a default as a recipe writes it (null, true, 1e-06, [a, b]), or "required"."""
    if value is dataclasses.MISSING:
        return "required"
    value = getattr(value, "value", value)  # an enum member: its name in a recipe
    value = list(value) if isinstance(value, tuple) else value
    return f"`{_cell(yaml.safe_dump(value, default_flow_style=True, width=10**9).split(chr(10))[0])}`"


def settings_tables(command: str, seen: set[str]) -> str:
    """Return the markdown tables of `lopti COMMAND`'s settings, one per class that declares some of them (the
    command's dataclasses and their bases): lopti's own field by field, those of TRL and transformers as one line
    each (`--help` lists them all). Fields in `seen` (shown earlier on the page: `lopti compare` takes all of
    `lopti train`'s) are left out, and added to it."""
    from lopti.cli import _settings_classes  # the classes `lopti COMMAND --help` lists

    lines = []
    for schema in _settings_classes(command):
        fields = {item.name: item for item in dataclasses.fields(schema) if item.init}
        for cls in schema.__mro__:
            declared = [fields[name] for name in vars(cls).get("__annotations__", {}) if name in fields]
            declared = [item for item in declared if item.name not in seen]
            seen.update(item.name for item in declared)
            if not declared:
                continue
            title = f"{cls.__name__} ({cls.__module__.split('.')[0]})"
            if not title.endswith("(lopti)"):
                names = ", ".join(f"`{item.name}`" for item in declared[:6])
                lines += [
                    f"**{title}**: {len(declared)} more settings ({names}, …); `lopti {command} --help` "
                    "lists each with its help and default.",
                    "",
                ]
                continue
            summary = (cls.__doc__ or "").strip().split("\n")[0]
            lines += [f"**{title}** — {summary}", "", "| key | value | default | what it does |", "|---|---|---|---|"]
            for item in declared:
                default = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
                lines.append(
                    f"| `{item.name}` | `{_cell(getattr(item.type, '__name__', item.type))}` | {_shown(default)} | "
                    f"{_cell(item.metadata.get('help', ''))} |"
                )
            lines.append("")
    return "\n".join(lines) or "No settings beyond those listed above."


class Record(File):
    """A file of results/ in the site: copied as it is, a record's markdown included (not rendered as a page)."""

    def is_documentation_page(self) -> bool:
        return False


def records(root: Path = ROOT) -> list[Path]:
    """Return the files of `root`/results to publish: those git tracks or would track, as its ignore rules leave out
    what a study writes besides its records; every file there where `root` is no git checkout (an sdist)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "results"],
            cwd=root, capture_output=True, check=True,
        ).stdout.decode()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return sorted(path for path in (root / "results").rglob("*") if path.is_file())
    return sorted(root / name for name in listed.split("\0") if name and (root / name).is_file())


def on_files(files: Files, config) -> Files:
    """Publish the records under results/ beside the pages, as files the pages may link to."""
    for path in records():  # at results/... in the site, read from results/... in the repository
        uri = path.relative_to(ROOT).as_posix()
        files.append(
            Record(
                uri, str(ROOT), config["site_dir"], config["use_directory_urls"], inclusion=InclusionLevel.NOT_IN_NAV
            )
        )
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    """Fill the settings markers, and point links at results/ to the records published in the site."""
    seen: set[str] = set()
    markdown = MARKER.sub(lambda match: settings_tables(match.group(1), seen), markdown)
    page_dir = posixpath.dirname(page.file.src_uri) or "."

    def published(match: re.Match) -> str:
        target = posixpath.normpath(posixpath.join("docs", page_dir, match.group(1)))  # from the repository root
        return f"]({posixpath.relpath(target, page_dir)}{match.group(2) or ''})"

    return RECORD_LINK.sub(published, markdown)
