"""The examples in dpcore's docstrings run as written: every module under dpcore/ whose source holds a
``>>>`` example is collected here (new examples need no registration), run by :mod:`doctest`."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.paths import ROOT

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
MODULES = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for path in (ROOT / "dpcore").rglob("*.py")
    if path.name != "__main__.py" and ">>> " in path.read_text(encoding="utf-8")
)


def test_the_public_entry_points_carry_examples() -> None:
    assert {"dpcore", "dpcore.mechanisms", "dpcore.registry", "dpcore.kmeans.lloyd"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests, f"{name} mentions '>>> ' but holds no docstring example"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
