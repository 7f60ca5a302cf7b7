"""The source registry: what every source kind declares, and the one place that dispatches on kinds.

A source kind is one module of this package: a frozen dataclass subclassing :class:`SourceSpec` (validated
in ``__post_init__``, holding no data and no secret, saved in session plans and job files by
:meth:`~SourceSpec.to_dict`), decorated with :func:`register`, and imported from the package's
``__init__``. The spec declares its widgets as data (:class:`Field`: label, help; a choice is listed by
:meth:`~SourceSpec.options`) and reads itself: :meth:`~SourceSpec.load` (the whole table, or a uniform
sample above the row limit, with the whole table's fingerprint, in one pass), :meth:`~SourceSpec.batch`
(what the out-of-core engines read: Parquet files where they lie, a table read whole, or chunks staged as
Parquet; :mod:`dpcore.outofcore.source`) and :meth:`~SourceSpec.fingerprint`. The Data page
(``pages/data.py``, ``ui/datasets.py``), the batch command (``python -m dpcore run-plan``, through
:func:`from_command_line`) and the dashboard's batch jobs (:func:`batch_source`) go through
:data:`SOURCES` and never name a kind.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import pandas as pd
import sqlalchemy as sa

from dpcore.errors import DataError, ParameterError

if TYPE_CHECKING:
    from dpcore.data.sources.common import SourceSettings

__all__ = [
    "SOURCES",
    "Batch",
    "BatchChunks",
    "BatchFiles",
    "BatchTable",
    "Field",
    "LoadedSource",
    "SourceContext",
    "SourceSpec",
    "batch_source",
    "from_command_line",
    "register",
    "source_from_batch",
    "source_from_dict",
]


@dataclass(frozen=True)
class Field:
    """One widget of a source kind on the Data page, filling the spec fields ``fills`` (default: the one
    named ``name``): chosen from the kind's :meth:`SourceSpec.options` (``widget="choose"``; ``empty`` is
    said when there is none, with ``{name}`` of earlier fields filled in) or typed (``"text"``, several
    lines)."""

    name: str
    label: str
    widget: Literal["choose", "text"] = "choose"
    help: str = ""
    placeholder: str = ""
    empty: str = ""
    fills: tuple[str, ...] = ()

    @property
    def targets(self) -> tuple[str, ...]:
        """The spec fields this widget fills."""
        return self.fills or (self.name,)


@dataclass(frozen=True)
class LoadedSource:
    """A source read in one pass: ``table`` is the whole table, or a uniform sample of it when
    ``sampled`` (``sample_seed`` draws the same rows again); ``fingerprint`` and ``n_rows`` are always
    the whole table's."""

    table: pd.DataFrame
    fingerprint: str
    n_rows: int
    sampled: bool
    sample_seed: int | None
    description: str


def _compute(key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
    return compute()


@contextmanager
def _given(engine: sa.Engine) -> Iterator[sa.Engine]:
    yield engine


@dataclass(frozen=True)
class SourceContext:
    """What reading a spec needs besides the spec: the allow-listed ``folders`` and connection names
    ``databases`` (``connect`` gives the engine of one, left open; else ``urls`` by name, an engine opened
    for one read and disposed), a read's time limit ``timeout_s`` (None: none, the batch job's) and
    ``memo(key, compute)``, which may keep a listing (the Data page keeps one for a minute)."""

    folders: tuple[str, ...] = ()
    databases: tuple[str, ...] = ()
    urls: Mapping[str, str] = field(default_factory=dict)
    connect: Callable[[str], sa.Engine] | None = None
    timeout_s: float | None = None
    memo: Callable[[tuple[Any, ...], Callable[[], Any]], Any] = _compute

    def engine(self, name: str) -> AbstractContextManager[sa.Engine]:
        """The engine of the connection ``name``, for one ``with`` block."""
        if self.connect is not None:
            return _given(self.connect(name))
        if name in self.urls:
            from dpcore.data.sources.database import url_engine

            return url_engine(self.urls[name])
        raise DataError(f"No database connection for '{name}'; the operator must configure it.")

    def url(self, name: str) -> str:
        """The URL of the connection ``name``, password included (for a batch job's process only)."""
        if name in self.urls:
            return self.urls[name]
        with self.engine(name) as engine:
            return engine.url.render_as_string(hide_password=False)


@dataclass(frozen=True)
class BatchFiles:
    """Parquet files the engine reads where they lie: the file or folder ``root`` (its ``.parquet`` files
    below), stamped before the fingerprint pass and checked unchanged after the release is computed."""

    root: Path


@dataclass(frozen=True)
class BatchTable:
    """A table ``read()`` whole by the Data page's own reader, fingerprinted and staged as it is."""

    read: Callable[[], pd.DataFrame]


@dataclass(frozen=True)
class BatchChunks:
    """Rows read once in chunks: ``read()`` opens (number of rows, the chunks as the Data page reads
    them), which are fingerprinted and staged as Parquet (one staging type per column)."""

    label: str
    read: Callable[[], AbstractContextManager[tuple[int, Iterator[pd.DataFrame]]]]


Batch = BatchFiles | BatchTable | BatchChunks
S = TypeVar("S", bound="SourceSpec")


class SourceSpec(ABC):
    """Base of every source kind's spec. A subclass is a frozen dataclass of strings and declares:

    - ``kind``: the key its saved form carries; ``title``: its option on the Data page; ``allow_list``:
      the operator's list its :attr:`where` must be in (``"folders"`` or ``"databases"``);
    - ``fields``: its widgets, in order (:class:`Field`), one per dataclass field;
    - ``reread``: its rows may change without notice (a database): a read is kept for the operator's
      ``source_cache_ttl_s`` only and can be read again; otherwise it is kept while :meth:`stamp` holds;
    - ``command_form``: how the batch command names it (``--source ...``), for messages.
    """

    kind: ClassVar[str]
    title: ClassVar[str]
    allow_list: ClassVar[Literal["folders", "databases"]]
    fields: ClassVar[tuple[Field, ...]]
    reread: ClassVar[bool] = False
    command_form: ClassVar[str]

    @property
    @abstractmethod
    def label(self) -> str:
        """How the Data page names the source (its default dataset name)."""

    @property
    @abstractmethod
    def where(self) -> str:
        """The allow-listed folder or connection name it reads (``allow_list`` says which)."""

    def to_dict(self) -> dict[str, str]:
        """The saved form: ``kind`` and the fields (:func:`source_from_dict` reads it back)."""
        return {"kind": self.kind, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    @classmethod
    @abstractmethod
    def intro(cls, settings: SourceSettings) -> str:
        """What the Data page says above the kind's widgets."""

    @classmethod
    @abstractmethod
    def options(cls, name: str, ctx: SourceContext, chosen: Mapping[str, str]) -> dict[str, dict[str, str]]:
        """The choices of the widget ``name``: shown label -> the spec fields it fills, given the fields
        ``chosen`` before it."""

    @abstractmethod
    def stamp(self, ctx: SourceContext) -> tuple[Any, ...]:
        """What a kept read of the spec depends on besides the spec: its files' (path, modification time,
        size), a connection's URL. Checks the spec against ``ctx`` (an allow-list) on the way."""

    @abstractmethod
    def load(self, ctx: SourceContext, *, max_rows: int, sample_seed: int) -> LoadedSource:
        """The whole table, or above ``max_rows`` a uniform sample drawn with ``sample_seed``, and the whole
        table's fingerprint, in one pass."""

    @abstractmethod
    def batch(self, ctx: SourceContext) -> Batch:
        """What the out-of-core engines read (:mod:`dpcore.outofcore.source`)."""

    def fingerprint(self, ctx: SourceContext) -> str:
        """The whole table's fingerprint (:func:`dpcore.data.fingerprint`), read in one streaming pass."""
        from dpcore.data.fingerprint import FingerprintStream, fingerprint

        batch = self.batch(ctx)
        if isinstance(batch, BatchTable):
            return fingerprint(batch.read())
        with FingerprintStream() as stream:
            if isinstance(batch, BatchFiles):
                from dpcore.data.sources.common import parquet_frames, parquet_parts

                files = parquet_parts(batch.root) if batch.root.is_dir() else [batch.root]
                for frame in parquet_frames(files, batch.root.name):
                    stream.update(frame.dropna(how="all"))
            else:
                with batch.read() as (_, chunks):
                    for chunk in chunks:
                        stream.update(chunk.dropna(how="all"))
            return stream.hexdigest()

    @abstractmethod
    def command_line(self) -> list[str]:
        """The ``run-plan`` arguments after ``--source`` that name it; a placeholder for anything secret."""

    @classmethod
    def from_command_line(
        cls, source: str, table: str | None, query: str | None
    ) -> tuple[SourceSpec, SourceContext] | None:
        """The spec and context the batch command's ``--source`` (and ``--table`` / ``--query``) name, if
        they name this kind; None otherwise. A form of this kind given wrongly raises its error."""
        return None


class _Registry(Mapping[str, type[SourceSpec]]):
    """The source kinds by key, in registration order."""

    def __init__(self) -> None:
        self._kinds: dict[str, type[SourceSpec]] = {}

    def register(self, kind: type[S]) -> type[S]:
        """Add ``kind`` (a frozen dataclass subclassing :class:`SourceSpec` whose fields are declared)."""
        if not (isinstance(kind, type) and issubclass(kind, SourceSpec) and dataclasses.is_dataclass(kind)):
            raise ParameterError(f"{kind!r} is not a dataclass subclassing SourceSpec.")
        if not kind.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            raise ParameterError(f"The source kind {kind.__name__} must be a frozen dataclass.")
        names = [f.name for f in dataclasses.fields(kind)]
        if sorted(names) != sorted(n for f in kind.fields for n in f.targets):
            raise ParameterError(
                f"{kind.__name__}: declare one Field per dataclass field ({', '.join(names)})."
            )
        if kind.kind in self._kinds:
            raise ParameterError(f"A source kind named {kind.kind!r} is already registered.")
        self._kinds[kind.kind] = kind
        return kind

    def unregister(self, key: str) -> None:
        """Remove a kind (a test's own kind, when the test ends)."""
        self._kinds.pop(key, None)

    def __getitem__(self, key: str) -> type[SourceSpec]:
        return self._kinds[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def by_title(self) -> dict[str, type[SourceSpec]]:
        """The kinds by their Data page option."""
        return {k.title: k for k in self._kinds.values()}


#: Every source kind, by key (``folder_file``, ``database_table``, ...).
SOURCES = _Registry()
register = SOURCES.register


def source_from_dict(data: Mapping[str, Any]) -> SourceSpec:
    """The spec saved by ``spec.to_dict()`` (a session plan's, a job's)."""
    fields = {k: v for k, v in data.items() if k != "kind"}
    kind = SOURCES.get(str(data.get("kind")))
    if kind is None or not all(isinstance(v, str) for v in fields.values()):
        raise DataError(f"Not a saved data source: {dict(data)!r}; choose the source again on the Data page.")
    try:
        return kind(**fields)
    except TypeError as err:
        raise DataError(
            f"Not a saved source (its fields are not those of a {kind.__name__}); choose the source again on "
            "the Data page."
        ) from err


def from_command_line(
    source: str, table: str | None = None, query: str | None = None
) -> tuple[SourceSpec, SourceContext]:
    """The spec and context the batch command's ``--source`` (with ``--table`` or ``--query``) names: the
    first kind that reads that form (:meth:`SourceSpec.from_command_line`)."""
    for kind in SOURCES.values():
        found = kind.from_command_line(source, table, query)
        if found is not None:
            return found
    given = " and ".join(f"--{n}" for n, v in (("table", table), ("query", query)) if v is not None)
    forms = "; ".join(k.command_form for k in SOURCES.values())
    raise ParameterError(
        f"--source {source}{' with ' + given if given else ''} names no source the batch job reads; give "
        f"one of: {forms}."
    )


def batch_source(spec: SourceSpec, ctx: SourceContext) -> dict[str, Any]:
    """What a batch job's process needs to read ``spec`` (JSON): the spec, and its allow-listed folders or
    its connection's URL (password included: it goes to the job's process only)."""
    urls = {spec.where: ctx.url(spec.where)} if spec.allow_list == "databases" else {}
    return {"spec": spec.to_dict(), "folders": list(ctx.folders), "urls": urls}


def source_from_batch(data: Mapping[str, Any]) -> tuple[SourceSpec, SourceContext]:
    """The spec and context of :func:`batch_source`'s form."""
    spec = source_from_dict(data.get("spec") or {})
    return spec, SourceContext(folders=tuple(data.get("folders") or ()), urls=dict(data.get("urls") or {}))
