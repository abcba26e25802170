"""`lopti compare --jobs N`: a study's independent `lopti train` runs dispatched N at a time to an executor (not
distributed training): `concurrent.futures`' process pool on the local machine, or Ray (`--backend ray`, when
installed: the verl extra brings it) across a cluster.

Each run gets a fresh worker process (spawned locally; one Ray task per worker) with its own torch thread count,
so no torch state (threads, allocator, RNG) carries over from one run to the next. A run's output goes to a log
file in its run folder, since N progress displays would garble one terminal. A failing run does not stop the
others; the command names every failed run at the end (a local worker killed by the OS, out of memory say,
breaks the process pool, so the runs unfinished then are named too). Each run is dispatched once: no executor retries it
(Ray's task retries are off), since a rerun of the command resumes it from its last checkpoint.

Ctrl-C ends every worker, and so does the command's end by any means, SIGKILL included (`_end_with_the_command`):
a worker left training would hold its run folder, and the same command run again would train that run a second
time next to it.

With N = 1 and the local backend the runs train one after another in this process (the default), at the same
thread count, which gives the same results: each run seeds its own RNGs.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_for_ends
from pathlib import Path
from typing import Any

from lopti.errors import TrainingStopped

Runner = Callable[[dict[str, Any]], Any]
BACKENDS = ("local", "ray")


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


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """Send this process's stdout and stderr, the C level too (torch and tokenizers write there), to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    saved = []
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
        saved.append(os.dup(stream.fileno()))
        os.dup2(target, stream.fileno())
    try:
        yield
    finally:
        for stream, original in zip((sys.stdout, sys.stderr), saved, strict=True):
            stream.flush()
            os.dup2(original, stream.fileno())
            os.close(original)
        os.close(target)


def run_logged(job: Job, runner: Runner) -> str | None:
    """Train one job in a worker, its output in its log; return None, or a one-line error (its traceback goes
    to the log). Returned rather than raised: an exception need not survive the trip back to the command."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(job.threads)  # before torch starts
    with _output_to(job.log):
        try:
            import torch

            torch.set_num_threads(job.threads)
            runner(job.settings)
        except BaseException as error:
            traceback.print_exc()
            return _one_line(error)
    return None


def _end_with_the_command() -> None:
    """End this worker as soon as the process that started it ends, from a daemon thread.

    The command's `finally` ends its workers on any exit it sees, but a SIGKILL runs no code; the parent's
    sentinel (a pipe the OS closes when that process ends) is what still says so. The worker stops where it is:
    its run resumes from its last complete checkpoint, as after any other interruption.
    """
    sentinel = multiprocessing.parent_process().sentinel

    def watch() -> None:
        wait_for_ends([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="end with the command", daemon=True).start()


def _run_in_local_worker(job: Job, runner: Runner) -> str | None:
    _end_with_the_command()
    return run_logged(job, runner)


def _end_workers(pool: ProcessPoolExecutor) -> None:
    """Stop the pool's workers now: shutdown() alone would wait for the runs in progress to finish."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _local(jobs: list[Job], workers: int, runner: Runner) -> Iterator[tuple[Job, str | None]]:
    """Yield (job, error or None) as each job ends, `workers` spawned processes at a time, one process per job."""
    fresh = {"max_tasks_per_child": 1} if sys.version_info >= (3, 11) else {}  # 3.10: workers are reused
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), **fresh)
    ended = False
    try:
        pending = {pool.submit(_run_in_local_worker, job, runner): job for job in jobs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                job = pending.pop(future)
                try:
                    yield job, future.result()
                except Exception as error:  # the worker died (killed, out of memory) before it could say why
                    yield job, f"worker ended: {_one_line(error)}"
        ended = True
    finally:  # Ctrl-C or any other exit: no worker outlives the command
        if ended:
            pool.shutdown(wait=True)
        else:
            _end_workers(pool)


def _ray(jobs: list[Job], workers: int, runner: Runner) -> Iterator[tuple[Job, str | None]]:
    """Yield (job, error or None) as each job ends, as Ray tasks, at most `workers` at once, each on a fresh
    worker (`max_calls=1`) reserving its thread count in CPUs, never retried.

    Without a running Ray, a local one starts whose workers import from the command's sys.path; RAY_ADDRESS (or
    an earlier `ray.init`) joins a cluster instead, whose nodes must have lopti and the runner installed."""
    try:
        import ray
    except ImportError:
        raise ValueError("--backend ray: Ray is not installed (pip install ray, or lopti's verl extra)") from None
    if not ray.is_initialized():
        paths = os.pathsep.join(sys.path)
        environment = {} if os.environ.get("RAY_ADDRESS") else {"env_vars": {"PYTHONPATH": paths}}
        ray.init(runtime_env=environment or None, log_to_driver=False)
    task = ray.remote(max_calls=1, max_retries=0)(run_logged)
    waiting, running = list(jobs), {}
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                job = waiting.pop(0)
                running[task.options(num_cpus=job.threads, name=job.label).remote(job, runner)] = job
            done, _ = ray.wait(list(running), num_returns=1)
            for reference in done:
                job = running.pop(reference)
                try:
                    yield job, ray.get(reference)
                except Exception as error:  # the worker died, or could not import the runner
                    yield job, f"worker ended: {_one_line(getattr(error, 'cause', None) or error)}"
    finally:  # Ctrl-C or any other exit: no task outlives the command
        for reference in running:
            ray.cancel(reference, force=True)


def run_jobs(jobs: list[Job], workers: int, runner: Runner, backend: str = "local") -> None:
    """Train every job, `workers` at a time on `backend` ("local" or "ray"); raise TrainingStopped naming each
    run that failed."""
    if backend not in BACKENDS:
        raise ValueError(f"--backend {backend}: expected one of {', '.join(BACKENDS)}")
    if workers == 1 and backend == "local":
        for job in jobs:
            print(_start_line(job))
            with torch_threads(job.threads):
                runner(job.settings)
        return
    if not jobs:
        return
    for job in jobs:
        print(f"{_start_line(job)} in a worker; output in {job.log}", flush=True)
    failures = []
    for job, error in (_local if backend == "local" else _ray)(jobs, workers, runner):
        if error is None:
            print(f"{job.label}: done", flush=True)
        else:
            failures.append(f"{job.label} ({error})")
            print(f"{job.label}: failed, see {job.log}", flush=True)
    if failures:
        others = "; the others finished" if len(failures) < len(jobs) else ""
        raise TrainingStopped(
            f"{len(failures)} of {len(jobs)} runs failed: {'; '.join(failures)}{others}; "
            "run the same command again to retry the failed ones"
        )
