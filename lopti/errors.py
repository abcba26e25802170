"""How failures reach the user: the errors the `lopti` command prints as one line, and the checks of settings and
files that raise them before any work starts.

Bad input raises `UserError` (a ValueError; lopti's checks of settings, files and folders) or another ValueError /
FileNotFoundError / PermissionError naming the key, value or path (exit status 2). A run that cannot go on raises
`TrainingStopped`, and a non-finite number met inside the loss during training `NumericalFailure` (exit status 1).
This module imports nothing heavy, so the command can use it before torch is loaded.
"""

from __future__ import annotations

import difflib
import errno
import math
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# What torch's C++ writer says when a write fails; it names neither the file nor the cause.
TORCH_WRITE_FAILURES = ("unexpected pos", "basic_ios::clear", "file write failed", "PytorchStreamWriter failed")
LOW_SPACE_BYTES = 100 * 2**20  # after a failed write, less than this left means the disk filled up


class UserError(ValueError):
    """A setting, file or folder the user can fix; the message names it and says what to change (exit status 2)."""


class SettingError(UserError):
    """A setting's value that its dataclass refuses; `key` names the setting, so that a command can say where the
    value came from (the recipe or the command line)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def check_number(
    key: str,
    value: object,
    *,
    low: float | None = None,
    above: float | None = None,
    high: float | None = None,
    allowed: tuple = (),
) -> None:
    """Raise SettingError unless `value` is a finite number ≥ `low`, > `above` and ≤ `high` (each bound given), or
    one of the sentinels `allowed` (max_steps' -1). The settings dataclasses call it in `__post_init__`, so a value is
    checked however the dataclass is built: from the command line, a recipe or Python."""
    if value in allowed:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if (
        number
        and math.isfinite(value)
        and (low is None or value >= low)
        and (above is None or value > above)
        and (high is None or value <= high)
    ):
        return
    bounds = [f"{sign} {bound}" for sign, bound in (("≥", low), (">", above), ("≤", high)) if bound is not None]
    if not number:
        wanted = "a number"
    elif not bounds:
        wanted = "a finite number"
    else:
        wanted = ("" if math.isfinite(value) else "a finite number ") + " and ".join(bounds)
    raise SettingError(key, f"{key} must be {wanted}{''.join(f' (or {v})' for v in allowed)}, got {value!r}")


def check_keys(keys: Iterable[str], known: Iterable[str], source: str) -> None:
    """Refuse each key not in `known`, naming its source and the closest known keys."""
    known = sorted(known)
    said = []
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(key, known, 3)
            said.append(f"{key!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    if said:
        raise UserError(f"{source}: unknown key(s) {'; '.join(said)}")


class NumericalFailure(RuntimeError):
    """Training met a non-finite number where no setting was wrong (a diverged model); exit status 1."""


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM: a job scheduler's cancel, `kill`, or a distributed launcher ending the other
    processes once one of them has died. Handled like Ctrl-C (exit status 143): the run resumes from its last
    checkpoint."""


class TrainingStopped(RuntimeError):
    """A run (training, or `lopti eval`) stopped on purpose, before saving a broken state; the message says why and
    what to change."""


def check_output_folder(path: str | Path | None, key: str) -> Path:
    """Return `path` as a Path once it is known to be a folder this process can write to (or create).

    Checked up front so that a typo or a read-only disk fails in a second, not after the model is built.
    Nothing is left behind: a folder that does not exist yet is not created.
    """
    if path is None or not str(path).strip():
        raise UserError(f"{key} needs a folder path, got an empty value")
    folder = Path(path).expanduser()
    existing = folder
    while not existing.exists():
        if existing.is_symlink():
            raise UserError(f"{key} {folder}: {existing} is a broken symbolic link")
        existing = existing.parent
    if not existing.is_dir():
        what = "is" if existing == folder else f"cannot be created: {existing} is"
        raise UserError(f"{key} {folder} {what} a file, not a folder")
    try:  # os.access would say yes to root on a read-only mount; an actual write cannot lie
        Path(tempfile.mkdtemp(prefix=".lopti-write-test-", dir=existing)).rmdir()
    except OSError as error:
        raise PermissionError(f"{key} {folder}: cannot write in {existing} ({error.strerror})") from None
    return folder


# What torch.distributed's backends say when a process of the group has died (gloo's socket errors, NCCL's abort).
PEER_FAILURES = (
    "Connection reset by peer", "Connection closed by peer", "Broken pipe", "Connection refused",
    "NCCL communicator was aborted", "ProcessGroupNCCL", "Socket Timeout",
)  # fmt: skip


def peer_failure(error: BaseException) -> str | None:
    """Return what the collective said ("Connection reset by peer", ...) if `error` says another process of a
    distributed launch has died, else None. Such an error is the survivor's only news of it: the dead process
    wrote nothing."""
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return None
    for cause in _causes(error):
        said = next((marker for marker in PEER_FAILURES if marker in str(cause)), None)
        if said is None and type(cause).__name__ in ("DistError", "DistBackendError", "DistNetworkError"):
            said = next(iter(str(cause).strip().splitlines()), type(cause).__name__)[:160]
        if said is not None:
            return said
    return None


def _causes(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def newest_file(folder: Path, since: float) -> Path | None:
    """Return the file under `folder` modified last, if after `since` (the one a failed write left behind)."""
    newest, newest_time = None, since
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            try:
                modified = path.stat().st_mtime
            except OSError:
                continue
            if modified >= newest_time:
                newest, newest_time = path, modified
    return newest


def disk_full_message(error: BaseException, folder: str | Path | None, since: float) -> str | None:
    """Return "no space left on device while writing <path>" if `error` comes from a full disk, else None.

    An OSError says so itself (ENOSPC, EDQUOT); torch's writer only says "unexpected pos" or "basic_ios::clear",
    so those count when the output folder's disk is nearly full. The path is the file named by the error, else
    the newest file in `folder` written since `since` (the partial one), else the folder.
    """
    folder = Path(folder) if folder else Path.cwd()
    named = None
    full = False
    for cause in _causes(error):
        if isinstance(cause, OSError) and cause.errno in DISK_FULL_ERRNOS:
            full, named = True, named or cause.filename
        elif "No space left on device" in str(cause) or "Disk quota exceeded" in str(cause):
            full = True
        elif any(marker in str(cause) for marker in TORCH_WRITE_FAILURES):
            existing = next((p for p in (folder, *folder.parents) if p.exists()), Path.cwd())
            full = full or shutil.disk_usage(existing).free < LOW_SPACE_BYTES
    if not full:
        return None
    path = named or (newest_file(folder, since) if folder.is_dir() else None) or folder
    return f"no space left on device while writing {path}; free some space, then run the command again"


def check_report_to(report_to: str | list[str] | None) -> None:
    """Refuse a `report_to` integration that transformers does not know or that is not installed."""
    wanted = [report_to] if isinstance(report_to, str) else list(report_to or [])
    wanted = [name for name in wanted if name not in ("none", "all")]
    if not wanted:
        return
    from transformers.integrations import get_available_reporting_integrations
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    for name in wanted:
        if name not in INTEGRATION_TO_CALLBACK:
            raise UserError(f"report_to {name!r} is unknown; choose from {', '.join(INTEGRATION_TO_CALLBACK)}")
        if name not in get_available_reporting_integrations():
            raise UserError(f"report_to {name!r}: {name} is not installed (pip install {name}), or drop it")
