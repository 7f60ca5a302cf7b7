"""Out-of-core engine: the passes a release needs, as Ibis expressions run by DuckDB (embedded, the
default) or Apache Spark, with every noise draw still made in Python by ``dpcore.mechanisms.Sampler``.

One code path for both engines: :class:`TableFeatures` compiles the prepared feature space and each pass
(per-cluster counts and clipped sums under nearest-centre assignment) to the engine's SQL; the noisy-Lloyd
estimators take those statistics through ``fit_statistics``, so the budget schedule, initial centres and
noise are those of the in-memory path.
"""

from dpcore.outofcore.features import TableFeatures

__all__ = ["TableFeatures"]
