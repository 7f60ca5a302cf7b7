"""Out-of-core engine: the passes a release needs, as Ibis expressions run by DuckDB (embedded, the
default) or Apache Spark, with every noise draw still made in Python by ``dpcore.mechanisms.Sampler``.

One code path for both engines. :class:`TableFeatures` compiles the prepared feature space and the
DP-Lloyd / Blowfish round (per-cluster counts and clipped sums under nearest-centre assignment) to the
engine's SQL; the noisy-Lloyd estimators take those statistics through ``fit_statistics``, so the budget
schedule, initial centres and noise are the in-memory path's and a demo seed gives the same release.
:mod:`~dpcore.outofcore.clustering` gives the local mechanisms their clustering (k-means on a sample that
every engine draws alike, one assignment pass) and each row's leave-one-out shift;
:mod:`~dpcore.outofcore.colored` runs the colored mechanism on it (certificate passes) and
:mod:`~dpcore.outofcore.white` the white ones (one pass). :mod:`~dpcore.outofcore.locations` runs the
density grids (per-user cap and cell counts), :mod:`~dpcore.outofcore.source` opens Parquet, CSV and
database sources with their fingerprint, and :mod:`~dpcore.outofcore.run_plan` re-runs a saved release
plan (``python -m dpcore run-plan``).
"""

from dpcore.outofcore.features import TableFeatures

__all__ = ["TableFeatures"]
