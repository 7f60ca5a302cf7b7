"""Re-run a saved release plan on a full table as a batch job (``python -m dpcore run-plan``).

The plan comes from a release manifest (``<stem>-manifest.json`` or the ``.json`` bundle written by
:func:`dpcore.releases.make_release`, or :meth:`dpcore.plan.ReleasePlan.to_manifest`) and is rebuilt and
re-validated by :meth:`~dpcore.plan.ReleasePlan.from_manifest`. The job refuses a source whose fingerprint
is not the plan's, rebuilds the release's input from the fields of the plan's typed preparation steps
(:mod:`dpcore.steps`; k-means: public bounds, scaling, rows dropped for missing values; locations: rows
dropped, the coordinate and user columns, the public region), whatever the column names, runs the
mechanism's passes out of core, then releases through
:func:`dpcore.releases.make_release`: same ledger account, same artifacts, and the request id decides
whether anything is spent (an id already in the ledger returns the first release and spends nothing).
Source files rewritten while the job read them are refused before anything is written or spent
(:meth:`~dpcore.outofcore.source.Source.check_unchanged`), and one removed while the engine reads it is
named in the error.

A mechanism without out-of-core passes (its spec declares no ``out_of_core`` release, e.g. DP-Lloyd + MCMC,
planar Laplace and PriLocation) runs in memory when the table, after the plan's dropped rows, has at most
``memory_rows`` rows (``--memory-rows``, else ``DPCORE_JOB_MEMORY_ROWS``, default 2,000,000:
:func:`dpcore.config.job_memory_rows`): one COUNT pass, then the engine's prepared rows (k-means: the features
scaled by :attr:`~dpcore.outofcore.features.TableFeatures.scaling_map`, bit for bit those of
``dpcore.data.prepare``; locations: the coordinate and user columns validated by
:class:`~dpcore.outofcore.locations.TableLocations`) are read into the in-memory inputs, so the release is the
dashboard's on that table. Above the limit the job refuses before the mechanism runs and before any debit.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dpcore import config
from dpcore.artifacts import artifacts_folder, check_request_id
from dpcore.data.sources import SourceContext, SourceSpec, from_command_line
from dpcore.errors import DataError, DPCoreError, ParameterError
from dpcore.kmeans.registry import KMeansInputs
from dpcore.ledger import Ledger
from dpcore.location.geometry import Region
from dpcore.location.plan_steps import read_location_steps
from dpcore.location.registry import LocationInputs
from dpcore.outofcore.features import SCALINGS, TableFeatures, is_infinite, require_columns
from dpcore.outofcore.feeds import is_spark, spark_frame
from dpcore.outofcore.locations import TableLocations
from dpcore.outofcore.source import Engine, in_table_order, open_spec, spark_session
from dpcore.plan import ReleasePlan, registry
from dpcore.private_bounds import BoundsStep
from dpcore.releases import Release, make_release
from dpcore.steps import DropMissing, Features, Impute, Unreadable
from dpcore.trajectory.outofcore import SparkTrajectories, TrajectoryTable
from dpcore.trajectory.plan_steps import read_trajectory_steps

PLACEHOLDER = (-1.0, 1.0)  # bounds of a feature whose bounds the release estimates privately first



def kmeans_steps(plan: ReleasePlan) -> tuple[dict[str, tuple[float, float]], str, list[str]]:
    """(public bounds per feature in order, scaling, columns whose missing rows are dropped) from the
    fields of the plan's preparation steps; anything that cannot be recomputed out of core (data-derived
    steps, imputation, a step of another kind) is refused."""
    private = list(plan.private_bounds.get("features", ())) if plan.private_bounds else []
    if private and in_memory(plan):
        raise ParameterError(
            f"The plan estimates the bounds of {', '.join(private)} privately at release; a batch job "
            "replays that step for mechanisms with out-of-core passes only. Choose DP-Lloyd, or release in "
            "the dashboard."
        )
    derived = plan.data_derived_steps
    if derived:
        raise ParameterError(
            f"The plan's preparation read values from the data ({'; '.join(derived)}); a batch job cannot "
            "recompute it. Make the plan with dropped rows, public bounds and min-max or no scaling."
        )
    features: Features | None = None
    dropped: list[str] = []
    for step in plan.preparation:
        if isinstance(step, DropMissing):
            dropped += step.columns
        elif isinstance(step, BoundsStep | Impute):  # make_release runs the first; the second has no effect
            continue
        elif isinstance(step, Features) and features is None:
            features = step
        else:
            raise ParameterError(f"The batch job cannot replay the preparation step {step.text!r}.")
    if features is None:
        raise ParameterError("The plan records no features with public bounds; prepare features first.")
    # a placeholder box for a feature whose bounds the step estimates, before the mechanism
    bounds = {f: features.public.get(f, PLACEHOLDER) for f in features.features}
    if set(features.features) - set(features.public) != set(private) or features.scaling not in SCALINGS:
        raise ParameterError(
            f"The plan's scaling {features.scaling!r} or bounds read from the data cannot run out of core; "
            "use min-max or no scaling, with public bounds."
        )
    return bounds, features.scaling, dropped


def _valid(table: Any, column: str) -> Any:
    """True where ``column`` holds a value: not null, and not NaN or +-inf in a float column (what the Data
    page's "drop" removes, ``dpcore.data.handle_missing``)."""
    x = table[column]
    if table.schema()[column].is_floating():
        return x.notnull() & ~(x.isnan() | is_infinite(x))
    return x.notnull()


def drop_missing(table: Any, dropped: list[str]) -> Any:
    """``table`` without the rows missing a value (null, NaN or +-inf in a float column) in ``dropped``."""
    require_columns(table, dropped)
    keep = [_valid(table, c) for c in dropped]
    return table.filter(keep) if keep else table


def plan_features(plan: ReleasePlan, table: Any) -> TableFeatures:
    """The plan's feature space over ``table``: its drop steps applied, then its bounds and scaling.

    Refuses (one COUNT pass) a table whose features still miss a value after the plan's drop steps: the
    dashboard cannot make such a plan (``prepare`` refuses missing features), so its drop step was edited
    out, and the rows the features' filter would drop are not in the manifest."""
    bounds, scaling, dropped = kmeans_steps(plan)
    kept = drop_missing(table, dropped)
    require_columns(kept, list(bounds))
    unchecked = [c for c in bounds if c not in dropped]
    if unchecked:
        bad = [~_valid(kept, c) for c in unchecked]
        sums = {f"m{j}": b for j, b in enumerate([functools.reduce(operator.or_, bad), *bad])}
        counts = kept.aggregate(**{k: b.cast("int64").sum() for k, b in sums.items()}).to_pandas().iloc[0]
        if int(counts["m0"] or 0):
            named = [c for j, c in enumerate(unchecked) if int(counts[f"m{j + 1}"])]
            raise ParameterError(
                f"{int(counts['m0']):,} row(s) miss a value in feature(s) {', '.join(named)} that the plan's "
                "preparation does not drop, so its manifest would not describe the rows the release drops. "
                "A plan is not edited by hand: download it again from the dashboard."
            )
    return TableFeatures.from_bounds(kept, bounds, scaling)  # type: ignore[arg-type]


def location_steps(plan: ReleasePlan) -> tuple[list[str], str, str, str | None, Region]:
    """(columns whose missing rows are dropped, latitude, longitude and user columns, public region) from a
    location plan's steps; data-derived preparation (an imputation) is refused."""
    derived = plan.data_derived_steps
    if derived:
        raise ParameterError(
            f"The plan's preparation read values from the data ({'; '.join(derived)}); a batch job cannot "
            "recompute it. Make the plan with dropped rows instead."
        )
    unreplayable = [s.text for s in plan.preparation if isinstance(s, Unreadable)]
    if unreplayable:
        raise ParameterError(f"The batch job cannot replay the preparation step {unreplayable[0]!r}.")
    dropped = [c for step in plan.preparation if isinstance(step, DropMissing) for c in step.columns]
    lat, lon, user, region = read_location_steps(plan.preparation)
    if not plan.scope:  # every location release protects a unit: the release checks it is the plan's
        raise ParameterError(
            "The plan does not say what it protects (its scope, e.g. 'per user (at most 5 locations each)'), "
            "so its manifest would not describe the release. A plan is not edited by hand: download it "
            "again from the dashboard."
        )
    return dropped, lat, lon, user, region


def plan_locations(plan: ReleasePlan, table: Any) -> TableLocations:
    """The plan's location input over ``table``: its drop steps applied, then its columns and region."""
    dropped, lat, lon, user, region = location_steps(plan)
    return TableLocations(drop_missing(table, dropped), lat, lon, user, region)


def plan_trajectories(plan: ReleasePlan, table: Any) -> TrajectoryTable | SparkTrajectories:
    """The plan's trajectory input over ``table`` (DuckDB or Spark): its columns, zone, region, gap and
    speed limit, read by the passes of :mod:`dpcore.trajectory.outofcore`."""
    derived = plan.data_derived_steps
    if derived:
        raise ParameterError(
            f"The plan's preparation read values from the data ({'; '.join(derived)}); a batch job cannot "
            "recompute it. Make the plan with dropped rows instead."
        )
    columns, tz, region, gap, speed = read_trajectory_steps(plan.preparation)
    if is_spark(table):
        return SparkTrajectories(spark_frame(table), columns, region, gap, speed, tz=tz)
    backend = table.get_backend()
    backend._run_pre_execute_hooks(table)  # registers the expression's in-memory tables
    source = f"({backend.compile(table)}) AS fixes"
    return TrajectoryTable(backend.con, source, columns, region, gap, speed, tz=tz)


def batch_refusal(plan: ReleasePlan, rows: int | None = None) -> str | None:
    """Why a batch job would refuse ``plan`` before running its mechanism (its preparation cannot be
    replayed, or it reads the rows in memory and ``rows``, the whole table's rows when known, is above
    :func:`dpcore.config.job_memory_rows` while the plan drops no rows), or None. A plan that drops rows
    is not refused on ``rows``: the job counts the rows left and decides then, before any debit."""
    try:
        if plan.domain == "trajectory":
            read_trajectory_steps(plan.preparation)
            return None
        dropped = location_steps(plan)[0] if plan.domain == "location" else kmeans_steps(plan)[2]
        if rows is not None and not dropped:
            check_rows(plan, rows)
    except DPCoreError as err:
        return str(err)
    return None


def in_memory(plan: ReleasePlan) -> bool:
    """True if ``plan``'s mechanism has no out-of-core passes: a batch job reads the rows into memory."""
    return plan.spec.out_of_core is None


def memory_limit(memory_rows: int | None = None) -> int:
    """``memory_rows`` checked (a positive whole number), or the configured limit when None."""
    if memory_rows is None:
        return config.job_memory_rows()
    if isinstance(memory_rows, bool) or not isinstance(memory_rows, int) or memory_rows < 1:
        raise ParameterError(f"--memory-rows must be a positive whole number of rows (got {memory_rows!r}).")
    return memory_rows


def check_rows(plan: ReleasePlan, rows: int, memory_rows: int | None = None) -> None:
    """Refuse an in-memory mechanism (:func:`in_memory`) on more than the limit's rows (``memory_rows``,
    default :func:`dpcore.config.job_memory_rows`); out-of-core mechanisms take any number."""
    if not in_memory(plan):
        return
    limit = memory_limit(memory_rows)
    if rows <= limit:
        return
    specs = registry(plan.domain).values()
    out_of_core = ", ".join(s.label for s in specs if s.out_of_core is not None)
    raise ParameterError(
        f"{plan.spec.label} reads the rows in memory and the table has {rows:,} rows, above a batch job's "
        f"limit of {limit:,}: choose a mechanism that runs out of core ({out_of_core}), or raise the limit "
        "(DPCORE_JOB_MEMORY_ROWS, or run-plan --memory-rows) on a machine with the memory."
    )


def kmeans_in_memory(features: TableFeatures) -> KMeansInputs:
    """The in-memory inputs of ``features``' rows: the scaled values (prepare's, bit for bit), in the
    table's order, with its public bounds, names and inverse scaling."""
    t = features.rows
    raw = t.mutate(**{f"x{j}": t[n].cast("float64") for j, n in enumerate(features.feature_names)})
    values = in_table_order(raw, *(f"x{j}" for j in range(features.n_features))).to_numpy(dtype=np.float64)
    return dataclasses.replace(features.described, X=np.ascontiguousarray(features.scaling_map(values)))


def locations_in_memory(locations: TableLocations) -> LocationInputs:
    """The in-memory inputs of ``locations``' rows, in the table's order: the coordinates and the user ids
    as text (as the Locations page reads them; each row its own person without a user column)."""
    names = [locations.lat_column, locations.lon_column, *filter(None, [locations.user_column])]
    frame = in_table_order(locations.table, *names)
    users = None if locations.user_column is None else frame[locations.user_column].astype(str).to_numpy()
    return LocationInputs(
        frame[locations.lat_column].to_numpy(dtype=np.float64),
        frame[locations.lon_column].to_numpy(dtype=np.float64),
        users,
        locations.region,
    )


def start_spark() -> Any:
    """The Spark session of a batch job (:func:`~dpcore.outofcore.source.spark_session`); without a Java
    runtime (``JAVA_HOME/bin/java``, else ``java`` on PATH, as Spark looks for it), or when Spark does not
    start, a ``ParameterError`` naming the fix."""
    home = os.environ.get("JAVA_HOME")
    java = Path(home, "bin", "java") if home else shutil.which("java")
    if java is None or not Path(java).is_file():
        where = f"JAVA_HOME={home} has no bin/java" if home else "JAVA_HOME is not set and no java is on PATH"
        raise ParameterError(
            f"--engine spark needs a Java runtime (17 or newer): {where}. Install one (apt-get install "
            "default-jre-headless) and put it on PATH or set JAVA_HOME, or run with --engine duckdb."
        )
    from pyspark.errors import PySparkException

    try:
        return spark_session()
    except PySparkException as err:
        raise ParameterError(
            f"Spark did not start ({err}); check its Java runtime and DPCORE_SPARK_MASTER, or run with "
            "--engine duckdb."
        ) from None


def run_plan(
    manifest: Mapping[str, Any],
    source: SourceSpec | str | os.PathLike[str],
    *,
    ledger: Ledger,
    artifacts_dir: str | os.PathLike[str],
    user: str,
    engine: Engine = "duckdb",
    table: str | None = None,
    query: str | None = None,
    context: SourceContext | None = None,
    request_id: str | None = None,
    name: str | None = None,
    spark: Any = None,
    progress: Callable[[str], None] | None = None,
    memory_rows: int | None = None,
) -> Release:
    """Release ``manifest``'s plan on ``source`` (see the module docstring) and return the release.

    ``request_id``: default the manifest's own (a plan already released under it is returned, not
    spent again), else ``plan-`` and the first 32 hex digits of the plan's key, so re-running one plan
    never spends twice. ``source`` is a source spec read with ``context`` (its allow-listed folders, its
    connection's URL: :func:`dpcore.data.sources.source_from_batch`), or the batch command's ``--source``
    with ``table`` or ``query`` (one read-only SELECT), read by the kind that reads that form
    (:func:`dpcore.data.sources.from_command_line`).
    ``progress`` is called with each stage, in words (the fingerprint pass, the mechanism's passes).
    ``memory_rows``: most rows read into memory for a mechanism without out-of-core passes (None: the
    configured :func:`dpcore.config.job_memory_rows`); above it ``ParameterError`` before any debit.
    Raises ``DataError`` when the source is not the plan's table.
    """
    say = progress or (lambda _stage: None)
    plan = ReleasePlan.from_manifest(manifest)
    limit = memory_limit(memory_rows) if in_memory(plan) else None  # a bad setting is refused now
    rid = check_request_id(str(request_id or manifest.get("request_id") or f"plan-{plan.key[:32]}"))
    artifacts_folder(artifacts_dir)  # before reading any row: a folder that cannot be made is refused now
    if engine == "spark" and spark is None:
        spark = start_spark()
    if isinstance(source, SourceSpec):
        spec, ctx = source, context or SourceContext()
    else:
        spec, ctx = from_command_line(os.fspath(source), table, query)
    say("reading every row of the source once for its fingerprint")
    with open_spec(spec, ctx, engine, spark=spark) as src:
        if src.fingerprint != plan.fingerprint:
            raise DataError(
                f"The source's fingerprint {src.fingerprint[:16]} is not the plan's {plan.fingerprint[:16]} "
                f"(dataset {plan.dataset_name!r}): it is not the table the plan was made on. Point --source "
                "at that table, or make a new plan on this one."
            )
        read = {"location": plan_locations, "trajectory": plan_trajectories}.get(plan.domain, plan_features)
        where = "Spark" if engine == "spark" else "DuckDB"
        try:
            inputs: Any = read(plan, src.table)
            if in_memory(plan):
                say("counting the rows the release reads")
                rows = inputs.n_rows if isinstance(inputs, TableLocations) else inputs.n_rows()
                check_rows(plan, rows, limit)
                say(f"reading the {rows:,} rows into memory ({where}), running {plan.spec.label}, then "
                    "recording the release")
                materialise = locations_in_memory if plan.domain == "location" else kmeans_in_memory
                inputs = materialise(inputs)
            else:
                say(f"running {plan.spec.label} over every row ({where}), then recording the release")
            return make_release(
                ledger,
                plan,
                inputs,
                request_id=rid,
                user=user,
                artifacts_dir=artifacts_dir,
                name=name or plan.domain,
                verify=src.check_unchanged,
            )
        except DPCoreError:
            raise
        except Exception:  # the engine failed to read the files again: say which one was removed
            src.check_unchanged()
            raise
