"""Release manifests: what a release records, as JSON, and reading it back.

:func:`build_manifest` makes a release's manifest (the plan's fields, what the run published, time, user,
request id, demo and local notices); :func:`load_manifest` reads one from a manifest file or a release's
JSON bundle and checks it rebuilds a valid plan; :func:`changed_fields` says in which plan fields a plan
differs from a recorded release's manifest.

Manifests written before plan steps were typed (plan version 1) recorded each preparation step as words
(``{"step": ..., "data_derived": ...}``). :func:`upgrade_plan` types each step from its words (the only
place words are read back) and keeps the typed step only if it gives back exactly those words and that
privacy effect; any other step becomes an :class:`~dpcore.steps.Unreadable` one, shown as written and
never replayed. As before, a column name containing ", " (in a step on several columns), "; " or "[" could
not be read from version 1 words.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from dpcore import __version__
from dpcore.errors import DataError, DPCoreError
from dpcore.steps import (
    DATA_BOUNDS,
    NO_EFFECT,
    PRIVATE_BOUNDS,
    BoundsFromData,
    CategoriesFromData,
    DropMissing,
    Features,
    Impute,
    ImputedFeature,
    PrepStep,
    Standardize,
    Unreadable,
)

if TYPE_CHECKING:
    from dpcore.plan import ReleasePlan

__all__ = [
    "DEMO_NOTICE",
    "LOCAL_NOTICE",
    "build_manifest",
    "changed_fields",
    "jsonable",
    "load_manifest",
    "upgrade_plan",
    "v1_step",
]

DEMO_NOTICE = "DEMO - not a privacy release"


LOCAL_NOTICE = (
    "Local (dataset-dependent) guarantee: not differential privacy. The noise is calibrated on this "
    "dataset's own rows, so it can reveal information about its most extreme rows."
)

_NUMBER = r"[-+0-9.eE]+"
_V1: list[tuple[re.Pattern[str], Callable[[re.Match[str]], PrepStep]]] = []


def _v1(pattern: str) -> Callable[[Callable[[re.Match[str]], PrepStep]], Callable[[re.Match[str]], PrepStep]]:
    def register(build: Callable[[re.Match[str]], PrepStep]) -> Callable[[re.Match[str]], PrepStep]:
        _V1.append((re.compile(pattern), build))
        return build

    return register


@_v1(r"drop on (?P<columns>.+) \((?P<n>\d+) rows? removed\)")
def _drop(m: re.Match[str]) -> PrepStep:
    return DropMissing(tuple(m["columns"].split(", ")), int(m["n"]))


@_v1(rf"(?P<s>median|mean|mode) on (?P<columns>.+) \(0 rows removed\)(?P<none>{re.escape(NO_EFFECT)})?")
def _impute(m: re.Match[str]) -> PrepStep:
    return Impute(m["s"], tuple(m["columns"].split(", ")), effect=m["none"] is None)


@_v1(r"features and public bounds: (?P<bounds>.*); scaling: (?P<scaling>\w+)")
def _features(m: re.Match[str]) -> PrepStep:
    shown = {f" {DATA_BOUNDS}": "data", f" {PRIVATE_BOUNDS}": "private"}
    either = "|".join(map(re.escape, shown))
    one = re.compile(rf"(?P<name>.+?)(?: \[(?P<lo>{_NUMBER}), (?P<hi>{_NUMBER})\]|(?P<shown>{either}))")
    names, bounds = [], []
    for part in m["bounds"].split("; "):
        b = one.fullmatch(part)
        if b is None:
            raise ValueError(part)
        names.append(b["name"])
        bounds.append(shown[b["shown"]] if b["shown"] else (float(b["lo"]), float(b["hi"])))
    return Features(tuple(names), tuple(bounds), m["scaling"])


@_v1(
    r"(?P<c>.+): missing values replaced by the (?P<s>median|mean|mode) of the data \(data-derived; one "
    r"person's value can change every imputed row\)"
)
def _imputed_feature(m: re.Match[str]) -> PrepStep:
    return ImputedFeature(m["c"], m["s"])


@_v1(r"(?P<c>.+): category list \((?P<n>\d+) categories\) read from the data; .*")
def _categories(m: re.Match[str]) -> PrepStep:
    return CategoriesFromData(m["c"], int(m["n"]))


@_v1(r"(?P<c>.+): public bounds taken from the data's min and max; they reveal the extreme values\.")
def _data_bounds(m: re.Match[str]) -> PrepStep:
    return BoundsFromData(m["c"])


@_v1(r"standardize: per-feature mean and standard deviation computed from the data")
def _standardize(m: re.Match[str]) -> PrepStep:
    return Standardize()


@_v1(r'location columns: latitude (?P<lat>".*?"), longitude (?P<lon>".*?"), user (?P<user>.*)')
def _location_columns(m: re.Match[str]) -> PrepStep:
    from dpcore.location.plan_steps import LocationColumns

    user = None if m["user"] == "none" else json.loads(m["user"])
    return LocationColumns(json.loads(m["lat"]), json.loads(m["lon"]), user)


@_v1(rf"public region: lat (?P<a>{_NUMBER})\.\.(?P<b>{_NUMBER}), lon (?P<c>{_NUMBER})\.\.(?P<d>{_NUMBER})")
def _region(m: re.Match[str]) -> PrepStep:
    from dpcore.location.plan_steps import PublicRegion

    return PublicRegion(*(float(m[k]) for k in "abcd"))


@_v1(
    r'trajectory columns: person (?P<person>".*?"), time (?P<time>".*?") '
    r"\(naive times read as (?P<tz>.*?)\), "
    r'latitude (?P<lat>".*?"), longitude (?P<lon>".*?"), trip (?P<trip>.*)'
)
def _trajectory_columns(m: re.Match[str]) -> PrepStep:
    from dpcore.trajectory.plan_steps import TrajectoryColumns

    trip = None if m["trip"] == "none (split at the gap)" else json.loads(m["trip"])
    names = (json.loads(m[k]) for k in ("person", "time", "lat", "lon"))
    return TrajectoryColumns(*names, trip=trip, tz=m["tz"])


@_v1(
    rf"public trip limits: region lat (?P<a>{_NUMBER})\.\.(?P<b>{_NUMBER}), lon (?P<c>{_NUMBER})\.\."
    rf"(?P<d>{_NUMBER}); new trip after a gap of (?P<gap>{_NUMBER}) s; fixes faster than "
    rf"(?P<speed>{_NUMBER}) m/s dropped"
)
def _trip_limits(m: re.Match[str]) -> PrepStep:
    from dpcore.trajectory.plan_steps import PublicTripLimits

    return PublicTripLimits(*(float(m[k]) for k in ("a", "b", "c", "d", "gap", "speed")))


def v1_step(words: str, data_derived: bool, private_bounds: Mapping[str, Any]) -> PrepStep:
    """The typed step of a version 1 step's words: the one that gives back those exact words and privacy
    effect, else :class:`~dpcore.steps.Unreadable`."""
    candidates: list[PrepStep] = []
    if private_bounds:
        from dpcore.private_bounds import BoundsStep

        try:
            candidates.append(BoundsStep.from_dict(private_bounds))
        except DPCoreError:
            pass
    for pattern, build in _V1:
        if (m := pattern.fullmatch(words)) is not None:
            try:
                candidates.append(build(m))
            except (ValueError, DPCoreError):  # a number or a JSON name that does not read
                continue
    for step in candidates:
        if step.text == words and step.data_derived is data_derived:
            return step
    return Unreadable(words, bool(data_derived))


def upgrade_plan(plan: Mapping[str, Any]) -> Mapping[str, Any]:
    """A manifest's plan fields at the current version: a version 1 plan with its preparation typed
    (:func:`v1_step`), any other unchanged (``ReleasePlan.from_manifest`` checks the version)."""
    if plan.get("plan_version") != 1 or not isinstance(plan.get("preparation"), list):
        return plan
    from dpcore.plan import PLAN_VERSION

    private = plan.get("private_bounds") or {}
    plan = _v1_guarantee(plan)
    steps = []
    for s in plan["preparation"]:
        if not isinstance(s, Mapping) or not isinstance(s.get("step"), str):
            raise TypeError(f"a preparation step is not text: {s!r}")
        steps.append(v1_step(s["step"], bool(s.get("data_derived")), private).to_dict())
    return {**plan, "plan_version": PLAN_VERSION, "preparation": steps}


#: Version 1 worded a local release under the classic Gaussian calibration as "analytic" (wrong); read back,
#: the word is corrected so its guarantee follows from its plan again (nothing else about it changed).
_V1_CLASSIC = ("(analytic Gaussian calibration;", "(classic Gaussian calibration;")


def _v1_guarantee(plan: Mapping[str, Any]) -> Mapping[str, Any]:
    params, text = plan.get("parameters") or {}, plan.get("guarantee")
    if params.get("calibration") != "classic" or not isinstance(text, str) or _V1_CLASSIC[0] not in text:
        return plan
    return {**plan, "guarantee": text.replace(*_V1_CLASSIC)}


def jsonable(value: Any) -> Any:
    """Plain JSON types: numpy scalars/arrays via ``tolist``, paths as text, non-finite floats as None."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def build_manifest(
    plan: ReleasePlan,
    *,
    user: str,
    request_id: str,
    details: Mapping[str, Any] | None = None,
    time: datetime | str | None = None,
) -> dict[str, Any]:
    """The release manifest as a JSON-ready dict: the plan's fields (definition, relation, account,
    guarantee, mechanism, parameters, preparation, eps, delta, dataset, mode) plus the run's published
    ``details``, time (default now, UTC), user and request id. Demo plans add ``"demo": true`` and
    ``"notice": DEMO_NOTICE``; local guarantees add ``"local_notice"``."""
    if time is None:
        time = datetime.now(UTC)
    manifest: dict[str, Any] = {
        **plan.to_manifest(),
        "details": jsonable(dict(details or {})),
        "demo": plan.mode == "demo",
        "is_local": not plan.spec.is_dp,
        "time": time.isoformat(timespec="seconds") if isinstance(time, datetime) else str(time),
        "user": user,
        "request_id": request_id,
        "dpcore_version": __version__,
    }
    if manifest["demo"]:
        manifest["notice"] = DEMO_NOTICE
    if manifest["is_local"]:
        manifest["local_notice"] = LOCAL_NOTICE
    return manifest


def load_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest in a manifest file or a release's JSON bundle (``{"manifest": ..., "data": ...}``),
    checked to rebuild a valid plan (a field missing, of the wrong type or altered is refused)."""
    from dpcore.plan import ReleasePlan

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(f"Cannot read the plan {path}: {err}. Give a release's manifest JSON file.") from err
    manifest = data.get("manifest", data) if isinstance(data, dict) else None
    inner = manifest.get("plan", manifest) if isinstance(manifest, dict) else None
    if not isinstance(inner, dict) or "mechanism" not in inner:
        raise DataError(f"{path} is not a release manifest (no mechanism); give a *-manifest.json file.")
    try:
        ReleasePlan.from_manifest(manifest)
    except KeyError as err:
        problem = f"it has no field {err.args[0]!r}"
    except (TypeError, AttributeError) as err:
        problem = f"a field has the wrong type: {err}"
    except ValueError as err:  # a DPCoreError too: a value out of range, a guarantee that does not follow
        problem = str(err).rstrip(".")
    else:
        return manifest
    raise DataError(
        f"{path} is not a valid release plan ({problem}); a plan is not edited by hand: download the plan "
        "again from the dashboard."
    )


#: The manifest fields that make a plan (:meth:`dpcore.plan.ReleasePlan.from_manifest`), not its labels.
PLAN_FIELDS = (
    "domain",
    "mechanism",
    "epsilon",
    "delta",
    "policy",
    "dataset_fingerprint",
    "parameters",
    "preparation",
    "sampling_mode",
    "seed",
    "scope",
    "epsilon_source",
    "private_bounds",
)


def changed_fields(first: Mapping[str, Any], plan: ReleasePlan) -> list[str]:
    """The plan fields in which ``plan`` differs from the manifest of a request's first release (a field
    that manifest does not record, being older, is not compared; steps recorded in words are typed
    first, :func:`upgrade_plan`)."""
    from dpcore.plan import to_json

    first = upgrade_plan(first)
    new = plan.to_manifest()
    return [k for k in PLAN_FIELDS if k in first and to_json(first[k]) != to_json(new.get(k))]
