"""Out-of-core engine: releases on tables that stay in DuckDB (embedded, the default) or Apache Spark.

One numpy kernel per pass (:mod:`~dpcore.outofcore.kernel`: a function on a block of rows returning
partial sums, fed blocks from memory, DuckDB or Spark and its partials added in a fixed order), shared
with the in-memory releases, so a demo seed gives the same release on every path. Engines read, filter,
project, drop missing rows, sample and count (Ibis expressions); every noise draw is made in Python by
``dpcore.mechanisms.Sampler``. :class:`~dpcore.outofcore.features.TableFeatures` is a k-means release's
table (DP-Lloyd and Blowfish rounds); :mod:`~dpcore.outofcore.clustering`, :mod:`~dpcore.outofcore.colored`
and :mod:`~dpcore.outofcore.white` run the local mechanisms; :mod:`~dpcore.outofcore.locations` the
density grids, mean positions and hotspots; :mod:`~dpcore.outofcore.source` opens Parquet, CSV and
database sources with their fingerprint, and :mod:`~dpcore.outofcore.run_plan` re-runs a saved release
plan (``python -m dpcore run-plan``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TableFeatures"]


def __getattr__(name: str) -> Any:
    """``TableFeatures`` imported on first use (the kernel module is imported by in-memory code and must
    not load the engines)."""
    if name == "TableFeatures":
        from dpcore.outofcore.features import TableFeatures

        return TableFeatures
    raise AttributeError(name)
