"""A release plan's preparation steps, typed: each is a frozen dataclass validated on creation.

A step holds the values a release reads (the columns dropped, the public bounds, the region, ...); its
sentence (:attr:`PrepStep.text`, what the release panel, the manifest and the report show) and its privacy
effect (:attr:`PrepStep.data_derived`: whether it read values from the data) are derived from them, never
parsed back. In a manifest a step is ``{"kind": ..., <its fields>, "step": <its sentence>, "data_derived":
...}`` (:meth:`PrepStep.to_dict`; :func:`step_from_dict` inverts it and refuses a sentence that does not
follow from the fields), so a batch job replays a plan from the fields alone, whatever its column names.

Kinds here: rows dropped or values imputed for missing values (:class:`DropMissing`, :class:`Impute`), the
k-means features with their public bounds and scaling (:class:`Features`) and what ``dpcore.data.prepare``
read from the data (:class:`ImputedFeature`, :class:`CategoriesFromData`, :class:`BoundsFromData`,
:class:`Standardize`). Elsewhere: bounds estimated privately (:class:`dpcore.private_bounds.BoundsStep`),
a location release's region estimated privately (:class:`dpcore.location.private_region.RegionStep`), its
columns and public region (:mod:`dpcore.location.plan_steps`), a trajectory release's columns and limits
(:mod:`dpcore.trajectory.plan_steps`).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from dpcore.errors import ParameterError

__all__ = [
    "NO_EFFECT",
    "BoundsFromData",
    "CategoriesFromData",
    "DropMissing",
    "Features",
    "Impute",
    "ImputedFeature",
    "PrepStep",
    "Standardize",
    "Unreadable",
    "step_from_dict",
]

NO_EFFECT = " (no column this release reads: no effect on it)"
DATA_BOUNDS = "read from the data, not published (centroids are released as fractions of this range)"
PRIVATE_BOUNDS = "estimated privately at release (see its step)"
#: Modules whose step kinds register on import (a manifest names kinds, :func:`step_from_dict` reads them).
_MODULES = (
    "dpcore.private_bounds",
    "dpcore.location.private_region",
    "dpcore.location.plan_steps",
    "dpcore.trajectory.plan_steps",
)
_KINDS: dict[str, type[PrepStep]] = {}


def names(columns: Any, what: str) -> tuple[str, ...]:
    """``columns`` as a tuple of distinct, non-empty column names; ``ParameterError`` otherwise."""
    if isinstance(columns, str) or not isinstance(columns, Sequence):
        raise ParameterError(f"{what} must be a list of column names, got {columns!r}.")
    out = tuple(columns)
    if not out or not all(isinstance(c, str) and c for c in out) or len(set(out)) != len(out):
        raise ParameterError(f"{what} must name at least one column, each once, got {list(out)!r}.")
    return out


def column(value: Any, what: str) -> str:
    """``value`` if it is a non-empty column name, else ``ParameterError``."""
    if not isinstance(value, str) or not value:
        raise ParameterError(f"{what} must be a column name, got {value!r}.")
    return value


def number(value: Any, what: str) -> float:
    """``value`` as a finite float (a bool is not a number here); ``ParameterError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ParameterError(f"{what} must be a finite number, got {value!r}.")
    return float(value)


@dataclasses.dataclass(frozen=True)
class PrepStep(ABC):
    """One preparation step: subclasses are frozen dataclasses with a ``kind`` (their tag in a manifest),
    fields validated in ``__post_init__``, and their sentence :attr:`text`."""

    kind: ClassVar[str] = ""
    spends: ClassVar[bool] = False  # the step spends its own epsilon_b on the rows (a private estimate)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            if _KINDS.get(cls.kind, cls) is not cls:
                raise TypeError(f"Two preparation step classes share the kind {cls.kind!r}.")
            _KINDS[cls.kind] = cls

    @property
    @abstractmethod
    def text(self) -> str:
        """The step in words: what the release panel, the manifest and the report show."""

    @property
    def data_derived(self) -> bool:
        """Whether the step read values from the data (one person can then move many rows)."""
        return False

    def __str__(self) -> str:
        return self.text

    def fields(self) -> dict[str, Any]:
        """The step's fields, JSON-ready (tuples as lists)."""
        return {
            f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init and f.compare
        }

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", <fields>, "step": text, "data_derived"}``, as a manifest records the step."""
        return {"kind": self.kind, **self.fields(), "step": self.text, "data_derived": self.data_derived}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def step_from_dict(data: Mapping[str, Any]) -> PrepStep:
    """The step a manifest records (:meth:`PrepStep.to_dict`); ``ParameterError`` for an unknown kind, a
    missing or invalid field, or a sentence or privacy effect that does not follow from the fields."""
    for module in _MODULES:
        importlib.import_module(module)
    if not isinstance(data, Mapping):
        raise ParameterError(f"A preparation step must be a JSON object, got {data!r}.")
    cls = _KINDS.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise ParameterError(
            f"Unknown preparation step kind {data.get('kind')!r}; known: {', '.join(sorted(_KINDS))}."
        )
    known = [f for f in dataclasses.fields(cls) if f.init and f.compare]
    missing = [f.name for f in known if f.name not in data and _required(f)]
    if missing:
        raise ParameterError(f"The {cls.kind} step has no {', '.join(missing)}; it was altered.")
    try:
        step = cls(**{f.name: _tuples(data[f.name]) for f in known if f.name in data})
    except TypeError as err:
        raise ParameterError(f"The {cls.kind} step is malformed ({err}).") from None
    if "step" in data and data["step"] != step.text:
        raise ParameterError(
            f"The {cls.kind} step's sentence does not follow from its fields; it was altered."
        )
    if "data_derived" in data and data["data_derived"] is not step.data_derived:
        raise ParameterError(f"The {cls.kind} step's privacy effect is not its kind's; it was altered.")
    return step


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class DropMissing(PrepStep):
    """Rows missing a value (null, NaN, +-inf) in any of ``columns`` removed (``removed`` rows of the
    table the plan was made on): a per-row filter, so the guarantee holds."""

    kind: ClassVar[str] = "drop_missing"
    columns: tuple[str, ...]
    removed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", names(self.columns, "The columns of a drop step"))
        if isinstance(self.removed, bool) or not isinstance(self.removed, int) or self.removed < 0:
            raise ParameterError(f"The rows a drop step removed must be a count, got {self.removed!r}.")

    @property
    def text(self) -> str:
        return f"drop on {', '.join(self.columns)} ({self.removed} rows removed)"


@dataclasses.dataclass(frozen=True)
class Impute(PrepStep):
    """Missing values of ``columns`` filled with their ``strategy`` ("median", "mean", "mode") of the data:
    data-derived when the release reads one of them (``effect``); otherwise it only fills rows that are
    kept whatever their values, so the release's input is the same as without it."""

    kind: ClassVar[str] = "impute"
    strategy: str
    columns: tuple[str, ...]
    effect: bool = True

    def __post_init__(self) -> None:
        if self.strategy not in ("median", "mean", "mode"):
            raise ParameterError(f"An imputation is by 'median', 'mean' or 'mode', not {self.strategy!r}.")
        object.__setattr__(self, "columns", names(self.columns, "The columns of an imputation"))
        if not isinstance(self.effect, bool):
            raise ParameterError(f"effect must be True or False, got {self.effect!r}.")

    @property
    def text(self) -> str:  # "(0 rows removed)": the Data page's words for every missing-value step
        return f"{self.strategy} on {', '.join(self.columns)} (0 rows removed)" + (
            "" if self.effect else NO_EFFECT
        )

    @property
    def data_derived(self) -> bool:
        return self.effect


@dataclasses.dataclass(frozen=True)
class Features(PrepStep):
    """The k-means features in order, each with its bounds in encoded units: a public (lower, upper), or
    "data" (read from the data, never published) or "private" (estimated privately at release by
    :class:`dpcore.private_bounds.BoundsStep`); values are clipped to them, then scaled by ``scaling``
    ("none", "minmax", or "standardize", whose data-derived mean and deviation are a step of their own)."""

    kind: ClassVar[str] = "features"
    features: tuple[str, ...]
    bounds: tuple[tuple[float, float] | str, ...]
    scaling: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", names(self.features, "The features"))
        if isinstance(self.bounds, str) or len(self.bounds) != len(self.features):
            raise ParameterError("Give one bound (a pair, 'data' or 'private') per feature.")
        bounds: list[tuple[float, float] | str] = []
        for name, b in zip(self.features, self.bounds, strict=True):
            if b in ("data", "private"):
                bounds.append(b)
                continue
            if isinstance(b, str) or not isinstance(b, Sequence) or len(b) != 2:
                raise ParameterError(f"The bounds of {name!r} must be (lower, upper), 'data' or 'private'.")
            lo, hi = (
                number(b[0], f"The lower bound of {name!r}"),
                number(b[1], f"The upper bound of {name!r}"),
            )
            if lo > hi:
                raise ParameterError(f"The bounds of {name!r} must have lower <= upper, got ({lo}, {hi}).")
            bounds.append((lo, hi))
        object.__setattr__(self, "bounds", tuple(bounds))
        if self.scaling not in ("none", "minmax", "standardize"):
            raise ParameterError(f"scaling must be 'none', 'minmax' or 'standardize', not {self.scaling!r}.")

    @property
    def public(self) -> dict[str, tuple[float, float]]:
        """The features with public bounds, and their bounds."""
        return {f: b for f, b in zip(self.features, self.bounds, strict=True) if not isinstance(b, str)}

    @property
    def private(self) -> tuple[str, ...]:
        """The features whose bounds the release estimates privately first."""
        return tuple(f for f, b in zip(self.features, self.bounds, strict=True) if b == "private")

    @property
    def text(self) -> str:
        shown = {"data": DATA_BOUNDS, "private": PRIVATE_BOUNDS}
        parts = [
            f"{f} {shown[b] if isinstance(b, str) else list(b)}"
            for f, b in zip(self.features, self.bounds, strict=True)
        ]
        return f"features and public bounds: {'; '.join(parts)}; scaling: {self.scaling}"


@dataclasses.dataclass(frozen=True)
class ImputedFeature(PrepStep):
    """Missing values of the feature ``column`` replaced by its ``strategy`` of the data (data-derived)."""

    kind: ClassVar[str] = "imputed_feature"
    column: str
    strategy: str

    def __post_init__(self) -> None:
        column(self.column, "The imputed feature")
        if self.strategy not in ("median", "mean", "mode"):
            raise ParameterError(f"An imputation is by 'median', 'mean' or 'mode', not {self.strategy!r}.")

    @property
    def text(self) -> str:
        return (
            f"{self.column}: missing values replaced by the {self.strategy} of the data (data-derived; one "
            "person's value can change every imputed row)"
        )

    @property
    def data_derived(self) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class CategoriesFromData(PrepStep):
    """The category list of the feature ``column`` (``n_categories``) read from the data (data-derived)."""

    kind: ClassVar[str] = "categories_from_data"
    column: str
    n_categories: int

    def __post_init__(self) -> None:
        column(self.column, "The encoded feature")
        n = self.n_categories
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ParameterError(f"n_categories must be a positive count, got {n!r}.")

    @property
    def text(self) -> str:
        return (
            f"{self.column}: category list ({self.n_categories} categories) read from the data; it reveals "
            "which categories occur. Declare it public with schema.with_categories."
        )

    @property
    def data_derived(self) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class BoundsFromData(PrepStep):
    """The bounds of the feature ``column`` taken from the data's min and max (data-derived)."""

    kind: ClassVar[str] = "bounds_from_data"
    column: str

    def __post_init__(self) -> None:
        column(self.column, "The feature bounded from the data")

    @property
    def text(self) -> str:
        return (
            f"{self.column}: public bounds taken from the data's min and max; they reveal the extreme values."
        )

    @property
    def data_derived(self) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class Standardize(PrepStep):
    """Each feature scaled by the data's mean and standard deviation (data-derived)."""

    kind: ClassVar[str] = "standardize"

    @property
    def text(self) -> str:
        return "standardize: per-feature mean and standard deviation computed from the data"

    @property
    def data_derived(self) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class Unreadable(PrepStep):
    """A step of a manifest written before steps were typed (plan version 1) whose words the reader of
    :mod:`dpcore.manifest` could not type: shown as written, never replayed by a batch job."""

    kind: ClassVar[str] = "unreadable"
    words: str
    derived: bool

    def __post_init__(self) -> None:
        if not isinstance(self.words, str) or not isinstance(self.derived, bool):
            raise ParameterError("An unreadable step keeps its words and whether it read the data.")

    @property
    def text(self) -> str:
        return self.words

    @property
    def data_derived(self) -> bool:
        return self.derived
