"""math-verify off the main thread: bounded in time, through a helper process that re-runs nothing."""

import os
import subprocess
import sys
import textwrap
import threading

from lopti.tasks.math import verify

SCRIPT = """
import threading

from lopti.tasks.math.reward import math_score

with open({marker!r}, "a") as marker:  # no main guard: a helper started by "spawn" would run this again
    marker.write("ran\\n")
scores = []
responses = ["\\\\boxed{{10^{{10^{{10}}}}}}", "\\\\boxed{{0.5}}"]
worker = threading.Thread(target=lambda: scores.extend(math_score(r, "1/2") for r in responses))
worker.start()
worker.join()
print(scores)
"""


def test_a_huge_power_in_a_worker_thread_returns_and_the_callers_script_runs_once(tmp_path):
    marker = tmp_path / "marker"
    script = tmp_path / "score.py"
    script.write_text(textwrap.dedent(SCRIPT.format(marker=str(marker))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # before the helper, math-verify had no timer off the main thread: this ran for hours holding the GIL
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0.0, 1.0]"
    assert marker.read_text() == "ran\n"


def test_a_helper_that_does_not_answer_in_time_is_killed_and_replaced(monkeypatch):
    assert verify.check_in_helper("0.5", "1/2") is True  # a helper is running
    helper = verify._helper[1]
    monkeypatch.setattr(verify, "hard_limit_s", lambda timeout_s: 0.2)
    assert verify.check_in_helper("10^{10^{10}}", "3") is False  # math-verify's own timer would need 1 s
    assert helper.poll() is not None  # killed
    monkeypatch.undo()
    assert verify.check_in_helper("\\frac{1}{2}", "0.5") is True
    assert verify._helper[1] is not helper


def test_worker_threads_get_the_main_threads_verdicts():
    cases = [
        ("0.5", "\\frac{1}{2}"),
        ("-\\frac{11}{2}", "-5.5"),
        ("0.51", "1/2"),
        ("\\sqrt{2}/2", "\\frac{\\sqrt2}{2}"),
    ]
    here = [verify.equivalent(answer, truth) for answer, truth in cases]
    there = []
    worker = threading.Thread(target=lambda: there.extend(verify.equivalent(a, t) for a, t in cases))
    worker.start()
    worker.join()
    assert here == there == [True, True, False, True]
