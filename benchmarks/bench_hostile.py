"""Run the hostile-input corpus (tests/hostile_corpus.py) through the engine and print the figures.

Each file goes through ``load_table -> infer_schema -> handle_missing -> prepare`` with a curator's
defaults, under a per-file time limit; Python allocations are traced per file (``tracemalloc``: numpy and
pandas buffers included, Arrow's own pool not), and the process's peak resident size is read at the end.
Prints the inputs tried, refused, loaded (prepared, refused at preparation, nothing to prepare), crashed
and hung, the slowest file and the largest traced peak; lists every crash and hang; exits 1 if there is
any.

    .venv/bin/python benchmarks/bench_hostile.py [--limit 20] [--no-trace]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.hostile_corpus import Outcome, corpus, run_case  # noqa: E402

MB = 2**20


def _traced(case, limit: float, trace: bool) -> tuple[Outcome, float]:
    if not trace:
        return run_case(case, limit), float("nan")
    tracemalloc.start()
    try:
        outcome = run_case(case, limit)
        return outcome, tracemalloc.get_traced_memory()[1] / MB
    finally:
        tracemalloc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=20.0, help="seconds per file before it counts as hung")
    parser.add_argument("--no-trace", action="store_true", help="skip tracemalloc (faster, no per-file peak)")
    args = parser.parse_args()

    start = time.perf_counter()
    cases = corpus()
    built = time.perf_counter() - start
    results = [_traced(case, args.limit, not args.no_trace) for case in cases]
    wall = time.perf_counter() - start - built

    outcomes = [o for o, _ in results]
    status = Counter(o.status for o in outcomes)
    stages = Counter(o.stage for o in outcomes if o.status == "loaded")
    generated = sum(not o.case.id.startswith("bad file: ") for o in outcomes)
    slowest = max(outcomes, key=lambda o: o.seconds)
    print(f"inputs tried  {len(outcomes)} ({generated} generated, {len(outcomes) - generated} hand-made)")
    print(f"refused       {status['refused']} (a DataError naming the problem and the fix)")
    print(
        f"loaded        {status['loaded']} (prepared {stages['prepared']}, refused at prepare "
        f"{stages['refused at prepare']}, no usable feature {stages['loaded']})"
    )
    print(f"crashed       {status['crashed']}")
    print(f"hung          {status['hung']} (limit {args.limit:g} s per file)")
    print(f"worst time    {slowest.seconds:.2f} s ({slowest.case.id})")
    if not args.no_trace:
        peak_outcome, peak = max(results, key=lambda r: r[1])
        print(f"peak memory   {peak:.1f} MB traced ({peak_outcome.case.id})")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process peak  {rss:.0f} MB resident (corpus built in memory included)")
    print(f"wall          {wall:.1f} s for the files, {built:.1f} s to build the corpus")
    for o in outcomes:
        if o.status in ("crashed", "hung"):
            print(f"  {o.status}: {o.case.id} ({o.case.name}): {o.error}")
    return 1 if status["crashed"] or status["hung"] else 0


if __name__ == "__main__":
    sys.exit(main())
