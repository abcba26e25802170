"""Time the K&K generator: 1,000 unique seven-person puzzles (target: under 10 s on a 2-core CPU).

Run: python bench/kk_generate.py
"""

import statistics
import time

from lopti.tasks.kk.generate import generate_puzzles


def main() -> None:
    for people in (3, 5, 7):
        times = []
        for seed in range(5):
            start = time.perf_counter()
            generate_puzzles(1000, people, seed=seed)
            times.append(time.perf_counter() - start)
        print(
            f"{people} people: 1000 puzzles in min {min(times):.2f} s / median {statistics.median(times):.2f} s"
            f" / max {max(times):.2f} s  ({10 / statistics.median(times):.0f}x under the 10 s target)"
        )


if __name__ == "__main__":
    main()
