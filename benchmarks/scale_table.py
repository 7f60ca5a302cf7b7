"""What the out-of-core benchmarks share: a generated Parquet table kept for one run, and their time unit.

``bench_scale.py`` and ``bench_locations.py`` import it (the scripts' folder is on ``sys.path`` when they
run).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import ibis.expr.types as ir


def timed(fn, *args, **kw) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - start, out


def table_arguments(ap: argparse.ArgumentParser) -> None:
    """--rows, --dir and --keep."""
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--dir", type=Path, help="folder for the table (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the generated table")


@contextmanager
def generated_table(
    args: argparse.Namespace, name: str, generate: Callable[[Path, int], None]
) -> Iterator[Path]:
    """The table ``name`` with ``args.rows`` rows in ``args.dir`` (or a temporary folder), generated unless it
    is there; removed on leaving unless ``args.keep``."""
    folder = args.dir or Path(tempfile.mkdtemp(prefix="dpcore-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    try:
        if not path.exists():
            t_gen, _ = timed(generate, path, args.rows)
            size = path.stat().st_size / 2**30
            print(f"generated {args.rows:,} rows in {t_gen:.1f} s: {path} ({size:.2f} GB)")
        yield path
    finally:
        if not args.keep:
            if args.dir is None:
                shutil.rmtree(folder, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def one_scan(table: ir.Table) -> float:
    """Seconds of one full DuckDB scan, the SUM of every column (the best of three runs): the time unit."""
    expr = table.aggregate(**{f"s{i}": table[c].sum() for i, c in enumerate(table.columns)})
    seconds = min(timed(expr.execute)[0] for _ in range(3))
    print(f"one full DuckDB scan (SUM of every column): {seconds:.2f} s")
    return seconds


def peak_gb() -> float:
    """The process's maximum resident set size so far, in GB (KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
