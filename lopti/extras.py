"""lopti's optional parts and what they need: a part imported without its extra says so in one line.

The base install (lopti.core, the tasks, `lopti data`, the verl plugin's math) asks only for what verl's own extras
pin alike. The TRL trainer (`lopti[trl]`), the `lopti` command's training and analysis (`lopti[cli]`) and the verl
plugin (`lopti[verl]`) each check, when imported, that their extra's packages are installed in the ranges
pyproject.toml declares, read from lopti's installed metadata, so the ranges are written once.
"""

from __future__ import annotations

from importlib import metadata

from packaging.requirements import Requirement

from lopti.errors import UserError


class MissingExtra(UserError, ImportError):
    """A part of lopti was imported where its extra's packages are missing or outside lopti's ranges."""


def unmet(extra: str) -> list[str]:
    """Return, for each requirement of lopti's `extra` that this environment does not meet, what is wrong with it."""
    try:
        declared = [Requirement(line) for line in metadata.requires("lopti") or []]
    except metadata.PackageNotFoundError:  # lopti imported from a source tree that was never installed
        return []
    problems = []
    for requirement in declared:
        if requirement.marker is None or not requirement.marker.evaluate({"extra": extra}):
            continue
        if requirement.name == "lopti":
            problems += [problem for sub in sorted(requirement.extras) for problem in unmet(sub)]
            continue
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{requirement.name}{requirement.specifier} (not installed)")
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement.name}{requirement.specifier} ({version} is installed)")
    return problems


def require(extra: str, part: str) -> None:
    """Raise `MissingExtra`, one line naming each package and range, unless `extra`'s requirements are met."""
    problems = unmet(extra)
    if problems:
        raise MissingExtra(f'{part} needs {", ".join(problems)}: pip install "lopti[{extra}]"')
