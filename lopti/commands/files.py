"""Run-folder safety: one lopti process per folder at a time, and files that are either whole or absent.

The lock is an OS lock (`flock`) on `.lopti.lock` in the folder, not a pid file: the kernel releases it
when its holder exits, however it exits (crash, kill -9), so it is never left stale.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
    handle = (folder / LOCK_NAME).open("a+")  # "a+": opening must not wipe the holder's pid
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise ValueError(
            f"{folder} is in use by another lopti process (pid {holder}); wait for it to end or choose another folder"
        ) from None
    try:
        handle.truncate(0)
        handle.write(str(os.getpid()))  # only to name the holder in the message above
        handle.flush()
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename, so a kill never leaves half a file."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
