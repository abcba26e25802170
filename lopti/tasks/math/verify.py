"""math-verify's equivalence check, bounded in time from any thread.

math-verify limits each parse and comparison with SIGALRM, which Python delivers only to the main thread;
called from any other thread it has no limit at all, and sympy can then compute without end on an answer such as
10^{10^{10}} while holding the GIL. So off the main thread the check runs in a helper process (a plain
`python -c`, so no script of the caller's is re-run, as multiprocessing's "spawn" would), whose main
thread has the timer; a helper that does not answer within `hard_limit_s` is killed and the answer scores
as wrong. One helper serves every thread, one request at a time, over JSON lines on its stdin and stdout.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import warnings

DEFAULT_TIMEOUT_S = 1  # seconds per parse or comparison; a sane answer takes milliseconds
HELPER_START_LIMIT_S = 120.0  # starting Python and importing sympy; slow only on a very busy machine
MATH_VERIFY_STEPS = 6  # per check: two parses, then up to 2 × 2 comparisons, each under its own timer
HELPER_COMMAND = "from lopti.tasks.math.verify import serve; serve()"
_helper_lock = threading.Lock()
_helper: tuple[int, subprocess.Popen] | None = None  # (pid of the process that started it, helper)


def check_here(answer: str, ground_truth: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> bool:
    """Return math-verify's verdict on `answer` (LaTeX) against `ground_truth`, in the calling thread.

    Bounded only in a main thread: math-verify's timer needs SIGALRM.
    """
    from math_verify import LatexExtractionConfig, parse, verify

    gold = parse(f"${ground_truth}$", parsing_timeout=timeout_s)
    predicted = parse(f"\\boxed{{{answer}}}", extraction_config=[LatexExtractionConfig()], parsing_timeout=timeout_s)
    if not gold or not predicted:
        return False
    return bool(verify(gold, predicted, timeout_seconds=timeout_s))


def hard_limit_s(timeout_s: int) -> float:
    """Return how long the helper may take for one check before it is killed (every timer, plus slack)."""
    return MATH_VERIFY_STEPS * timeout_s + 5.0


def serve() -> None:
    """Run as the helper: answer each JSON line [answer, ground truth, timeout] with a JSON true/false line."""
    protocol, sys.stdout = sys.stdout, sys.stderr  # whatever a library prints must not garble the replies
    import math_verify  # noqa: F401  (imported before "ready", so a first request is not charged for it)

    print('"ready"', file=protocol, flush=True)
    for line in sys.stdin:
        try:
            verdict = check_here(*json.loads(line))
        except Exception:  # math-verify and sympy fail in many ways on model output; a failure is "not equal"
            verdict = False
        print(json.dumps(verdict), file=protocol, flush=True)


def _reply(helper: subprocess.Popen, limit_s: float) -> object:
    """Return the helper's next JSON line, or raise TimeoutError if none comes within `limit_s`."""
    if not select.select([helper.stdout], [], [], limit_s)[0]:
        raise TimeoutError(f"math-verify helper gave no answer within {limit_s:g} s")
    line = helper.stdout.readline()
    if not line:
        raise EOFError("math-verify helper exited")
    return json.loads(line)


def _start_helper() -> subprocess.Popen:
    # the helper must import the same lopti and math_verify as this process, however its path was set up
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER_COMMAND], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env
    )
    try:
        if _reply(helper, HELPER_START_LIMIT_S) == "ready":
            return helper
    except (TimeoutError, EOFError, ValueError):
        pass
    _stop(helper)
    warnings.warn(
        "math-verify's helper process did not start: answers checked off the main thread score 0", stacklevel=2
    )
    raise RuntimeError("math-verify helper process did not start")


def _stop(helper: subprocess.Popen) -> None:
    helper.kill()
    helper.wait()
    for pipe in (helper.stdin, helper.stdout):
        pipe.close()


def check_in_helper(answer: str, ground_truth: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> bool:
    """Return math-verify's verdict computed in the helper process; False if it did not answer in time."""
    global _helper
    with _helper_lock:
        ours = _helper is not None and _helper[0] == os.getpid()  # after a fork, the parent's helper is not ours
        if ours and _helper[1].poll() is not None:
            _stop(_helper[1])  # it died on its own
            ours = False
        if not ours:
            _helper = None  # stays None if no helper starts
            _helper = (os.getpid(), _start_helper())
        helper = _helper[1]
        try:
            helper.stdin.write(json.dumps([answer, ground_truth, timeout_s]).encode() + b"\n")
            return _reply(helper, hard_limit_s(timeout_s)) is True
        except (TimeoutError, EOFError, OSError, ValueError):
            _stop(helper)  # stuck in C code that no timer interrupts, or dead; the next check starts a new one
            _helper = None
            return False


def equivalent(answer: str, ground_truth: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> bool:
    """Return True iff math-verify finds `answer` equal to `ground_truth`, in bounded time from any thread."""
    if threading.current_thread() is threading.main_thread():
        return check_here(answer, ground_truth, timeout_s)
    return check_in_helper(answer, ground_truth, timeout_s)
