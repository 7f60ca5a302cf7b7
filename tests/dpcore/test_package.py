"""``import dpcore``: the notebook's names, loaded on first use, and ``dpcore.release``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import dpcore
from dpcore.errors import ParameterError
from dpcore.mechanisms import Sampler
from tests.paths import ROOT

PROBE = """
import sys
import dpcore
print(sorted(m for m in ("numpy", "pandas", "scipy", "sklearn", "dpcore.kmeans") if m in sys.modules))
"""


def test_import_dpcore_stays_light_and_every_exported_name_resolves() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    assert set(dir(dpcore)) >= set(dpcore.__all__)
    for name in dpcore.__all__:
        assert getattr(dpcore, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = dpcore.nothing


def test_release_runs_a_mechanism_by_key_and_refuses_what_is_no_release() -> None:
    X = np.array([[0.1, 0.2], [0.2, 0.1], [0.8, 0.9], [0.9, 0.8]] * 50)
    inputs = dpcore.KMeansInputs(X, lower=np.zeros(2), upper=np.ones(2))
    a = dpcore.release("dp_lloyd", inputs, epsilon=1.0, params={"n_clusters": 2}, random_state=3)
    b = dpcore.release("dp_lloyd", inputs, epsilon=1.0, params={"n_clusters": 2}, random_state=Sampler(3))
    assert a.table.equals(b.table)  # an int is the labelled demo seed, Sampler(seed)
    with pytest.raises(ParameterError, match="diagnostic"):
        dpcore.release("dp_lloyd", inputs, epsilon=1.0, random_state=Sampler.diagnostic(0))
    with pytest.raises(ParameterError, match=r"Unknown mechanism 'nope'.*dp_lloyd"):
        dpcore.release("nope", inputs, epsilon=1.0)
    with pytest.raises(ParameterError, match="no parameter k"):
        dpcore.release("dp_lloyd", inputs, epsilon=1.0, params={"k": 2})
