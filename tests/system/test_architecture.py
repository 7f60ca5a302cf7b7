"""The architecture's rules, checked on the source: one place per mechanism and per source kind.

A mechanism is named only by its own module (``dpcore/<domain>/mechanisms/``) and the registries; every other
module asks the spec (:class:`dpcore.registry.MechanismSpec`) for what it needs. A source kind is told apart
only by its own module and the source registry. The engine never imports Streamlit, and the pages hold
layout and widgets, not mathematics. Each rule names the offending file and line, so a failure says where
to look; each is also checked against a planted offender, so the rule itself cannot pass vacuously.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

import dpcore.kmeans.registry
import dpcore.location.registry
import dpcore.trajectory.registry
from tests.paths import ROOT

#: Product code: what a user runs (the app, its pages and helpers, the engine).
PRODUCT = ("app.py", "pages", "ui", "dpcore")
REGISTRIES = (
    dpcore.kmeans.registry.KMEANS,
    dpcore.location.registry.LOCATIONS,
    dpcore.trajectory.registry.TRAJECTORIES,
)


def mechanism_keys() -> frozenset[str]:
    return frozenset(key for registry in REGISTRIES for key in registry)


def allowed_to_name_mechanisms(rel: str) -> bool:
    """A mechanism's own module, the shared helpers of a domain's mechanisms, and the registries."""
    parts = rel.split("/")
    return "mechanisms" in parts[:-1] or parts[-1] == "registry.py"


def product_files() -> Iterator[tuple[str, ast.Module]]:
    for top in PRODUCT:
        paths = [ROOT / top] if top.endswith(".py") else sorted((ROOT / top).rglob("*.py"))
        for path in paths:
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), filename=str(path))


def key_literals(tree: ast.AST, keys: frozenset[str]) -> list[tuple[int, str]]:
    """Every string constant equal to a mechanism key (docstrings are prose and are skipped)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in keys
        and id(node) not in docstrings
    ]


def imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Modules imported at run time (imports under ``if TYPE_CHECKING:``, for annotations only, are not)."""
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module


def test_no_mechanism_is_named_outside_its_module_and_registry() -> None:
    keys = mechanism_keys()
    offenders = [
        f"{rel}:{line} {value!r}"
        for rel, tree in product_files()
        if not allowed_to_name_mechanisms(rel)
        for line, value in key_literals(tree, keys)
    ]
    assert offenders == [], "ask the spec instead of naming a mechanism:\n" + "\n".join(offenders)


def test_the_key_rule_catches_a_planted_key() -> None:
    keys = mechanism_keys()
    key = sorted(keys)[0]
    planted = ast.parse(f'"""Docstring naming {key} is prose."""\nif spec.key == {key!r}:\n    pass\n')
    assert key_literals(planted, keys) == [(2, key)]
    assert allowed_to_name_mechanisms("dpcore/kmeans/mechanisms/white.py")
    assert allowed_to_name_mechanisms("dpcore/location/registry.py")
    assert not allowed_to_name_mechanisms("dpcore/plan.py")
    assert not allowed_to_name_mechanisms("pages/kmeans.py")


#: Paper reproductions (``python -m dpcore.experiments.marketing``): like ``benchmarks/``, run by hand to
#: compare the mechanisms a paper names, by their modules' ``KEY``; never by the app or the batch job.
REPRODUCTIONS = "dpcore/experiments/"


def mechanism_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports of one mechanism's own module (``dpcore.<domain>.mechanisms.<name>``; shared ``_`` helpers are
    not one)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            parts = node.module.split(".")
            if len(parts) == 4 and parts[0] == "dpcore" and parts[2] == "mechanisms" and parts[3][0] != "_":
                found.append((node.lineno, node.module))
            elif len(parts) == 3 and parts[0] == "dpcore" and parts[2] == "mechanisms":
                found += [
                    (node.lineno, f"{node.module}.{alias.name}")
                    for alias in node.names
                    if alias.name[0] != "_"
                    and (ROOT / "dpcore" / parts[1] / "mechanisms" / f"{alias.name}.py").exists()
                ]
    return found


def test_no_mechanism_module_is_imported_by_name_outside_the_mechanisms() -> None:
    offenders = [
        f"{rel}:{line} {module}"
        for rel, tree in product_files()
        if not allowed_to_name_mechanisms(rel) and not rel.startswith(REPRODUCTIONS)
        for line, module in mechanism_modules(tree)
    ]
    assert offenders == [], "ask the registry for the spec instead:\n" + "\n".join(offenders)


def test_the_module_rule_catches_a_planted_import() -> None:
    tree = ast.parse(
        "from dpcore.kmeans.mechanisms.dp_lloyd import KEY\n"
        "from dpcore.kmeans.mechanisms import white, local_unavailable\n"
        "from dpcore.kmeans.mechanisms._gaussian import local_unavailable\n"
    )
    assert mechanism_modules(tree) == [
        (1, "dpcore.kmeans.mechanisms.dp_lloyd"),
        (2, "dpcore.kmeans.mechanisms.white"),
    ]


def test_the_engine_never_imports_streamlit() -> None:
    offenders = [
        f"{rel}:{line} {name}"
        for rel, tree in product_files()
        if rel.startswith("dpcore/")
        for line, name in imports(tree)
        if name.split(".")[0] == "streamlit"
    ]
    assert offenders == []


@pytest.mark.parametrize("library", ["numpy", "scipy", "sklearn", "opendp"])
def test_pages_hold_no_mathematics(library: str) -> None:
    """A page lays out widgets; numbers are computed in dpcore (and formatted by ui/)."""
    offenders = [
        f"{rel}:{line} {name}"
        for rel, tree in product_files()
        if rel.startswith("pages/")
        for line, name in imports(tree)
        if name.split(".")[0] == library
    ]
    assert offenders == []


def source_kind_names() -> tuple[frozenset[str], frozenset[str]]:
    """(class names, keys) of the registered source kinds."""
    from dpcore.data.sources import SOURCES

    return frozenset(kind.__name__ for kind in SOURCES.values()), frozenset(SOURCES)


def in_source_package(rel: str) -> bool:
    return rel.startswith("dpcore/data/sources/")


def isinstance_on(tree: ast.AST, classes: frozenset[str]) -> list[tuple[int, str]]:
    """Every ``isinstance(x, C)`` (or a tuple of classes) naming one of ``classes``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            named = {
                n.id if isinstance(n, ast.Name) else n.attr
                for n in ast.walk(node.args[1])
                if isinstance(n, ast.Name | ast.Attribute)
            }
            found += [(node.lineno, name) for name in sorted(named & classes)]
    return found


def test_no_source_kind_is_told_apart_outside_its_module_and_registry() -> None:
    classes, keys = source_kind_names()
    offenders = [
        f"{rel}:{line} {what}"
        for rel, tree in product_files()
        if not in_source_package(rel)
        for line, what in [*isinstance_on(tree, classes), *key_literals(tree, keys)]
    ]
    assert offenders == [], "dispatch through dpcore.data.sources.SOURCES instead:\n" + "\n".join(offenders)


def test_the_source_rule_catches_a_planted_isinstance() -> None:
    classes, keys = source_kind_names()
    name, key = sorted(classes)[0], sorted(keys)[0]
    planted = ast.parse(f"if isinstance(spec, (int, sources.{name})) or spec.kind == {key!r}:\n    pass\n")
    assert isinstance_on(planted, classes) == [(1, name)]
    assert key_literals(planted, keys) == [(1, key)]
    assert in_source_package("dpcore/data/sources/duckdb_file.py") and not in_source_package("ui/datasets.py")


def test_the_import_rule_skips_annotations_only() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import numpy\nimport scipy\n")
    assert [name for _, name in imports(tree)] == ["typing", "scipy"]
