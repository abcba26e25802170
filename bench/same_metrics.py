"""Check that two runs logged the same metrics at every step: `metrics.jsonl` line by line, timing fields left out.

For a change that must not change training (a refactor): run the same seeded configuration, with the same thread
count, on the code before and after, then compare. The check used for lopti/cpu/fast_path.py's refactor:

    OMP_NUM_THREADS=1 lopti train --max_steps 8 --evaluate false --report_to none --save_steps 100 --output_dir A
    (the same on the other code, --output_dir B)
    python bench/same_metrics.py A/metrics.jsonl B/metrics.jsonl

Exit status 0 when every line holds the same keys and values (floats compared exactly), 1 otherwise.
"""

from __future__ import annotations

import json
import sys

TIMING = ("time", "runtime", "per_second")  # wall-clock fields: step_time, train_runtime, train_*_per_second


def comparable(line: str) -> dict:
    """Return a metrics line's entries without its wall-clock ones."""
    return {key: value for key, value in json.loads(line).items() if not any(word in key for word in TIMING)}


def differences(before: list[str], after: list[str]) -> list[str]:
    """Return one line per step whose metrics differ, naming the first differing keys."""
    found = [f"{len(before)} lines before, {len(after)} after"] if len(before) != len(after) else []
    for number, (old, new) in enumerate(zip(before, after, strict=False), start=1):
        old, new = comparable(old), comparable(new)
        keys = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
        if keys:
            shown = ", ".join(f"{key}: {old.get(key)} vs {new.get(key)}" for key in keys[:3])
            found.append(f"line {number} (step {old.get('step')}): {len(keys)} key(s) differ: {shown}")
    return found


def main(before: str, after: str) -> int:
    with open(before) as a, open(after) as b:
        old, new = a.read().splitlines(), b.read().splitlines()
    found = differences(old, new)
    print("\n".join(found) if found else f"same metrics at every one of {len(old)} lines ({before}, {after})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
