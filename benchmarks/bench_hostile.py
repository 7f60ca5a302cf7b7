"""Run the hostile-input corpus (tests/hostile_corpus.py), regenerated with a new seed, through the engine.

Each file goes through ``load_table -> infer_schema -> fingerprint -> handle_missing -> prepare`` with a
curator's defaults, under a per-file time limit. The corpus is built anew each run: its fixed cases plus
issue 25's shapes (far workbook cells in any spelling and encoding, shared texts, repeated Parquet text,
many gzip members, blank lines, lone CRs, text that is not UTF-8, files with random bytes changed) drawn
from a seed the run picks (``--seed`` repeats one). Memory is the process's peak resident size (every file
and the corpus, built in memory, included: an upper bound for each file); ``--trace`` also traces Python
allocations per file (``tracemalloc``: numpy and pandas buffers, not Arrow's pool), which slows the run.

Prints the inputs tried, refused, loaded, crashed and hung, the slowest file, and as its last line

    hostile <n> files, <c> crashed, <h> hung, worst <s> s, peak <z> MB

and exits 1 if a file crashed or hung, the worst time is above 10 s or the peak is 1 GB or more.

    .venv/bin/python benchmarks/bench_hostile.py [--seed N] [--limit 20] [--trace]
"""

from __future__ import annotations

import argparse
import resource
import secrets
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.hostile_corpus import Case, Outcome, corpus, run_case  # noqa: E402

MB = 2**20
WORST_S = 10.0
PEAK_MB = 1024


def _traced(case: Case, limit: float, trace: bool) -> tuple[Outcome, float]:
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
    parser.add_argument("--seed", type=int, default=None, help="the corpus seed (default: a new one)")
    parser.add_argument("--limit", type=float, default=20.0, help="seconds per file before it counts as hung")
    parser.add_argument("--trace", action="store_true", help="trace Python allocations per file (slower)")
    args = parser.parse_args()
    seed = secrets.randbits(32) if args.seed is None else args.seed

    start = time.perf_counter()
    cases = corpus(seed)
    built = time.perf_counter() - start
    results = [_traced(case, args.limit, args.trace) for case in cases]
    wall = time.perf_counter() - start - built

    outcomes = [o for o, _ in results]
    status = Counter(o.status for o in outcomes)
    stages = Counter(o.stage for o in outcomes if o.status == "loaded")
    seeded = sum(o.case.id.startswith("seeded ") for o in outcomes)
    slowest = max(outcomes, key=lambda o: o.seconds)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    print(f"seed          {seed} (repeat with --seed {seed})")
    print(f"inputs tried  {len(outcomes)} ({seeded} drawn from the seed)")
    print(f"refused       {status['refused']} (a DataError naming the problem and the fix)")
    print(
        f"loaded        {status['loaded']} (prepared {stages['prepared']}, refused at prepare "
        f"{stages['refused at prepare']}, no usable feature {stages['loaded']})"
    )
    print(f"crashed       {status['crashed']}")
    print(f"hung          {status['hung']} (limit {args.limit:g} s per file)")
    print(f"worst time    {slowest.seconds:.2f} s ({slowest.case.id})")
    if args.trace:
        peak_outcome, traced = max(results, key=lambda r: r[1])
        print(f"traced peak   {traced:.1f} MB ({peak_outcome.case.id})")
    print(f"wall          {wall:.1f} s for the files, {built:.1f} s to build the corpus")
    for o in outcomes:
        if o.status in ("crashed", "hung"):
            print(f"  {o.status}: {o.case.id} ({o.case.name}): {o.error}")
    print(
        f"hostile {len(outcomes)} files, {status['crashed']} crashed, {status['hung']} hung, "
        f"worst {slowest.seconds:.2f} s, peak {peak:.0f} MB"
    )
    failed = status["crashed"] or status["hung"] or slowest.seconds > WORST_S or peak >= PEAK_MB
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
