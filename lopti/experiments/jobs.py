"""`lopti compare --jobs N`: a scheduler of independent `lopti train` runs, N at a time (not distributed training).

With N > 1 each run gets its own spawned process, so no torch state (threads, allocator, RNG) carries over
from one run to the next, and its own torch thread count, set before torch does any work. A run's output
goes to a log file in its run folder, since N progress displays would garble one terminal. A failing run
does not stop the others; the command names every failed run at the end. Ctrl-C ends every worker, and so does
the command's end by any means, SIGKILL included (`_end_with_the_command`): a worker left training would hold its
run folder, and the same command run again would train that run a second time next to it.

With N = 1 the runs train one after another in this process (the default), at the same thread
count, which gives the same results: each run seeds its own RNGs.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from lopti.errors import TrainingStopped

Runner = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Job:
    """One run to train: how messages name it, its settings, its torch thread count and its log file."""

    label: str
    settings: dict[str, Any]
    threads: int
    log: Path


def threads_per_run(jobs: int, threads: int) -> int:
    """Return each run's torch thread count: `threads` if given, else an equal share of torch's default."""
    if threads:
        return threads
    import torch

    return torch.get_num_threads() if jobs == 1 else max(1, torch.get_num_threads() // jobs)


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run the body with `count` torch threads, then restore the count it had."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _start_line(job: Job) -> str:
    return f"{job.label}: {'resuming' if job.settings.get('resume') else 'training'} ({job.threads} torch threads)"


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}".rstrip(": ")


def _end_with_the_command() -> None:
    """End this worker as soon as the process that started it ends, from a daemon thread.

    The command's `finally` ends its workers on any exit it sees, but a SIGKILL runs no code; the parent's
    sentinel (a pipe the OS closes when that process ends) is what still says so. The worker stops where it is:
    its run resumes from its last complete checkpoint, as after any other interruption.
    """
    sentinel = multiprocessing.parent_process().sentinel

    def watch() -> None:
        wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="end with the command", daemon=True).start()


def _work(job: Job, runner: Runner, report: Connection) -> None:
    """Train one job in a fresh worker process; send a one-line error back if it fails."""
    _end_with_the_command()
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(job.threads)  # before torch starts
    job.log.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(job.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    for stream in (sys.stdout, sys.stderr):  # the C level too: torch and tokenizers write there
        stream.flush()
        os.dup2(log, stream.fileno())
    try:
        import torch

        torch.set_num_threads(job.threads)
        runner(job.settings)
    except BaseException as error:
        traceback.print_exc()
        report.send(_one_line(error))
        raise SystemExit(1) from None
    finally:
        report.close()


def run_jobs(jobs: list[Job], workers: int, runner: Runner) -> None:
    """Train every job, `workers` at a time; raise TrainingStopped naming each run that failed."""
    if workers == 1:
        for job in jobs:
            print(_start_line(job))
            with torch_threads(job.threads):
                runner(job.settings)
        return
    context = multiprocessing.get_context("spawn")
    waiting, running, failures = list(jobs), {}, []
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                job = waiting.pop(0)
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(target=_work, args=(job, runner, sender), name=job.label)
                process.start()
                sender.close()
                running[process.sentinel] = (job, process, receiver)
                print(f"{_start_line(job)} in a worker; output in {job.log}", flush=True)
            for sentinel in wait(list(running)):
                job, process, receiver = running.pop(sentinel)
                process.join()
                if process.exitcode:
                    try:
                        error = receiver.recv()
                    except EOFError:  # killed before it could say why
                        error = f"worker ended with exit code {process.exitcode}"
                    failures.append(f"{job.label} ({error})")
                    print(f"{job.label}: failed, see {job.log}", flush=True)
                else:
                    print(f"{job.label}: done", flush=True)
                receiver.close()
    finally:  # Ctrl-C or any other exit: no worker outlives the command
        for _, process, _ in running.values():
            process.terminate()
        for _, process, _ in running.values():
            process.join()
    if failures:
        others = "; the others finished" if len(failures) < len(jobs) else ""
        raise TrainingStopped(
            f"{len(failures)} of {len(jobs)} runs failed: {'; '.join(failures)}{others}; "
            "run the same command again to retry the failed ones"
        )
