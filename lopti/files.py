"""Output-folder safety, for the commands' run and evaluation folders and the studies' folders alike: one lopti
process per folder at a time, files that are either whole or absent, and a folder that holds one thing only.

The lock is filelock's `FileLock` on `.lopti.lock` in the folder: an OS lock (`flock` on Linux), not a pid
file, so the kernel releases it when its holder exits, however it exits (crash, kill -9), and it is never left
stale. The holder writes its pid into the file only to name itself to a second process. `claim_folder` is the
one guard of `lopti eval`, `compare` and `compare --grid` against writing into a folder of other settings.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from lopti.errors import UserError

LOCK_NAME = ".lopti.lock"


@contextmanager
def folder_lock(folder: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (created if missing); fail at once with one line if another holds it.

    Two processes writing one run or evaluation folder interleave metrics.jsonl or records.jsonl and
    overwrite each other's model, so the second one must stop before it writes anything.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"{folder} cannot be a folder: a file is in the way") from None
    path = folder / LOCK_NAME
    lock = FileLock(path, timeout=0)  # no waiting: the second process must stop before it writes anything
    try:
        lock.acquire()
    except Timeout:
        holder = path.read_text(errors="replace").strip() or "unknown"
        raise ValueError(
            f"{folder} is in use by another lopti process (pid {holder}); wait for it to end or choose another folder"
        ) from None
    try:
        with contextlib.suppress(OSError), path.open("r+") as handle:  # "r+": the lock lives on this file
            handle.truncate(0)
            handle.write(str(os.getpid()))
        yield
    finally:
        lock.release()


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename, so a kill never leaves half a file."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


def _differences(stored: dict[str, Any], wanted: dict[str, Any], skipped: Collection[str]) -> list[str]:
    """Return each key whose value differs, as "key: OLD there, NEW now" (or "key differs" for long values)."""
    keys = sorted(k for k in (set(stored) | set(wanted)) - set(skipped) if stored.get(k) != wanted.get(k))
    shown = [(key, repr(stored.get(key)), repr(wanted.get(key))) for key in keys]
    return [f"{k}: {old} there, {new} now" if len(old + new) <= 80 else f"{k} differs" for k, old, new in shown]


def check_folder(
    out: Path, name: str, identity: dict[str, Any], what: str, *, allowed: Collection[str] = (),
    growable: Collection[str] = (), kept: Collection[str] = (),
    normalise: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any] | None:  # fmt: skip
    """Return the record `out/name` holds (None when there is none), or raise a UserError naming what is wrong.

    The record must describe `identity` (a JSON-ready mapping), apart from its keys `kept` (results stored
    next to the identity) and `growable` (lists a later command may extend). A folder without the record must
    be empty but for the lock and the entries `allowed`. `what` names the folder's kind ("an evaluation");
    `normalise` maps a record to the current keys before it is compared.
    """
    path = out / name
    if not path.exists():
        if out.exists() and any(p.name not in {LOCK_NAME, *allowed} for p in out.iterdir()):
            noun = what.split(" ", 1)[-1]
            raise UserError(f"{out} is not empty and holds no lopti {noun}; choose another --out")
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):  # blank (a kill while writing it) or not text
        stored = None
    if not isinstance(stored, dict):
        raise UserError(
            f"{path} is empty or damaged, so what {out} holds cannot be matched to settings; "
            f"delete {out} or choose another --out"
        )
    stored = normalise(stored) if normalise else stored
    differing = _differences(stored, identity, {*kept, *growable})
    if differing:
        raise UserError(
            f"{out} holds {what} with other settings ({'; '.join(differing)}); choose another --out or delete it"
        )
    return stored


def claim_folder(out: Path, name: str, identity: dict[str, Any], what: str, **options: Any) -> None:
    """Check `out` as `check_folder` does, then write the record `out/name`: `identity`, with the lists
    `growable` of the stored record extended by the identity's new items (a study that gains variants)."""
    path = out / name
    stored = check_folder(out, name, identity, what, **options)
    record = dict(identity) if stored is None else dict(stored)
    for key in options.get("growable", ()):
        if key in identity and stored is not None:
            record[key] = stored[key] + [v for v in identity[key] if v not in stored[key]]
    if stored is None or json.loads(path.read_text(encoding="utf-8")) != record:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(record, indent=1, sort_keys=True))
