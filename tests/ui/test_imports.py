"""The pages load no out-of-core engine until a sample's release panel needs one: importing the ui helpers
and the engine modules the server preloads (``ui.serve.ENGINE_MODULES``) leaves Ibis, DuckDB and PySpark
unloaded, so opening the K-means or Locations page after a server start does not wait for them (they cost
about 1 s more on the first page)."""

from __future__ import annotations

import subprocess
import sys

from tests.paths import ROOT

PROBE = """
import sys
import ui.serve
for name in ui.serve.ENGINE_MODULES:
    __import__(name)
import ui.release, ui.batch_job, ui.datasets, ui.kmeans_view, ui.locations_view, ui.ledger_view

print(sorted(m for m in ("ibis", "duckdb", "pyspark") if m in sys.modules))
"""


def test_the_page_helpers_do_not_import_the_out_of_core_engines() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
