"""What a newcomer's terminal shows during `lopti train`: progress while the held-out set is decoded and while RL
runs, and no warning from lopti or the libraries under it (a tiny run on a pseudo-terminal, as a user's shell is)."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest


@pytest.mark.slow
def test_a_run_on_a_terminal_shows_progress_and_no_warning(tmp_path):
    reader, writer = pty.openpty()
    fcntl.ioctl(writer, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 40 rows of 120 columns
    environment = {**os.environ, "LOPTI_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "lopti.cli", "train", "--task", "kk", "--max_steps", "2", "--train_puzzles", "32",
            "--eval_puzzles", "16", "--eval_samples", "2", "--report_to", "none",
            "--output_dir", str(tmp_path / "run")]  # fmt: skip
    process = subprocess.Popen(argv, stdout=writer, stderr=writer, env=environment, cwd=tmp_path)
    os.close(writer)
    output = b""
    while True:
        try:
            chunk = os.read(reader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        output += chunk
    os.close(reader)
    text = output.decode(errors="replace")
    assert process.wait(timeout=60) == 0, text[-3000:]
    assert re.search(r"eval before, greedy.*answer", text) and re.search(r"eval after, sampled.*answer", text)
    assert "step 2/2" in text  # RL's progress, one line per step
    assert not re.search(r"warn|deprecat", text, re.IGNORECASE), text
